"""The C ABI (adaptors/include/insitu_adaptor.h), its CMake package, the Fortran module and
the heat examples that use them.

The library, its installed package and the consumers (both examples, header checks) are
built once per session with CMake into a temporary directory. In-process tests load the
library with ctypes into this interpreter (it then uses the running Python) and drive
every entry point, with a stand-in adaptor module (tests/capi/capi_mock_adaptor.py) or the
real one; the examples run under mpiexec as a user starts them, embedding Python.
"""

from __future__ import annotations

import ctypes as ct
import glob
import json
import os
import re
import sys

import numpy as np
import pytest

from conftest import ROOT

CAPI_DIR = os.path.join(ROOT, "tests", "capi")
sys.path.insert(0, CAPI_DIR)
import capi_build  # noqa: E402
import capi_ctypes as C  # noqa: E402

from adaptors import capi  # noqa: E402
from insitu.launch import mpiexec  # noqa: E402

_env, _run = capi_build.env, capi_build.run


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """The library built, installed, and the consumers built against the install (once)."""
    missing = capi_build.missing_tools()
    if missing:
        pytest.fail("the C API needs " + ", ".join(missing) + " (scripts/ensure-system.sh installs them as root)")
    return capi_build.build(tmp_path_factory.mktemp("capi"))


def _need_fortran(build):
    if build.heat_fortran is None:
        pytest.skip("no Fortran compiler (gfortran) was found: the Fortran module and example were not built; "
                    "install gfortran (scripts/ensure-system.sh does as root)")


# --------------------------------------------------------------------------- the header


def test_header_compiles_as_c_and_cxx_with_the_layout_of_the_mirrors(build):
    got = {lang: json.loads(_run([exe], build.top).stdout) for lang, exe in
           (("C", build.header_c), ("C++", build.header_cxx))}
    assert got["C"].pop("language") == "C" and got["C++"].pop("language") == "C++"
    assert got["C"] == got["C++"]
    h = got["C"]
    for struct, mirror in (("insitu_field", C.Field), ("insitu_domain", C.Domain), ("insitu_mesh", C.Mesh),
                           ("insitu_results_t", C.Results)):
        assert h[f"sizeof {struct}"] == ct.sizeof(mirror), struct
        for key, off in h.items():
            if key.startswith(struct + "."):
                assert getattr(mirror, key.split(".")[1]).offset == off, key
    # capi.py's codes and tables are the header's
    assert {f"INSITU_{s.name}": int(s) for s in capi.Status} == {k: v for k, v in h.items()
                                                                 if k.startswith("INSITU_OK") or "_ERR_" in k}
    assert all(h[name] == code for code, (name, _) in capi.DTYPES.items())
    for table in (capi.MEMORIES, capi.LAYOUTS):
        assert all(h[name] == code for code, name in table.items())
    assert all(h[name] == code for code, (name, _) in capi.ASSOCIATIONS.items())
    # ... and the Fortran module's parameters
    f90 = open(os.path.join(ROOT, "adaptors", "fortran", "insitu_adaptor.f90")).read()
    consts = {m[0]: int(m[1]) for m in re.findall(r"\b(INSITU_[A-Z0-9_]+) = (\d+)", f90)}
    assert consts and all(h[k] == v for k, v in consts.items()), consts
    assert set(consts) == {k for k in h if k.startswith("INSITU_")}


# --------------------------------------------------------------------------- in-process


@pytest.fixture(scope="session")
def lib(build):
    from mpi4py import MPI  # initializes MPI in this process, as a simulation's MPI_Init would

    assert MPI.Is_initialized()
    return C.load(build.lib)


def _world() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.py2f()


def _err(lib) -> str:
    return lib.insitu_last_error().decode()


@pytest.fixture
def mock(lib, tmp_path, monkeypatch):
    """The library initialized with the stand-in adaptor; finalized afterwards."""
    monkeypatch.setenv("INSITU_ADAPTOR", "capi_mock_adaptor")
    monkeypatch.syspath_prepend(CAPI_DIR)
    import capi_mock_adaptor

    def init(**mock_cfg):
        cfg = {"pipelines": {"p1": {"f1": {"type": "contour", "params": {"field": "T", "iso_values": [0.5, 0.75]}}}},
               "mock": mock_cfg}
        path = tmp_path / "mock.json"
        path.write_text(json.dumps(cfg))
        assert lib.insitu_initialize(str(path).encode(), _world()) == C.OK, _err(lib)
        return capi_mock_adaptor

    yield init
    lib.insitu_finalize()


def test_every_entry_point_refuses_to_run_before_initialize(lib):
    lib.insitu_finalize()  # whatever ran before
    m = C.mesh([])
    v, n, r = ct.c_double(), ct.c_int(), C.Results()
    for call in (lambda: lib.insitu_execute(0, 0.0, ct.byref(m)), lambda: lib.insitu_results(ct.byref(r)),
                 lambda: lib.insitu_get_param(b"a", ct.byref(v)), lambda: lib.insitu_get_iso_count(b"p", ct.byref(n)),
                 lambda: lib.insitu_get_iso_value(b"p", 0, ct.byref(v)), lib.insitu_finalize):
        assert call() == C.ERR_NOT_INITIALIZED
        assert "before insitu_initialize" in _err(lib)
    assert r.step == -1 and r.stop == 0


def test_initialize_checks_its_arguments(lib, tmp_path):
    from mpi4py import MPI

    cfg = tmp_path / "c.yaml"
    cfg.write_text("pipelines: {}\n")
    cases = [(None, _world(), "config_path is NULL"), (b"", _world(), "config_path is empty"),
             (str(cfg).encode(), MPI.COMM_NULL.py2f(), "comm is MPI_COMM_NULL"),
             (str(cfg).encode(), 123456789, "comm=123456789 is not a valid communicator handle")]
    for path, comm, msg in cases:
        assert lib.insitu_initialize(path, comm) == C.ERR_ARGUMENT
        assert msg in _err(lib)
    assert lib.insitu_execute(0, 0.0, ct.byref(C.mesh([]))) == C.ERR_NOT_INITIALIZED


def test_malformed_config_is_reported_with_every_problem_and_its_path(lib, tmp_path, monkeypatch):
    monkeypatch.delenv("INSITU_ADAPTOR", raising=False)  # the real adaptor
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines:\n  p1:\n    f1: {type: kontour, params: {field: T}}\nscenez: {}\n")
    assert lib.insitu_initialize(str(bad).encode(), _world()) == C.ERR_CONFIG
    msg = _err(lib)
    assert msg.startswith("insitu_initialize: invalid insitu configuration (2 problems)")
    assert "pipelines/p1/f1" in msg and "kontour" in msg and "scenez" in msg
    assert lib.insitu_initialize(str(tmp_path / "missing.yaml").encode(), _world()) == C.ERR_CONFIG
    assert "missing.yaml: cannot read" in _err(lib)
    # nothing is initialized after a failed initialize
    assert lib.insitu_execute(0, 0.0, ct.byref(C.mesh([]))) == C.ERR_NOT_INITIALIZED


def test_host_fields_arrive_as_read_only_views_of_the_callers_memory(lib, mock):
    m = mock()
    rng = np.random.default_rng(0)
    t_c = rng.random((4, 5, 6))                                    # C order: k fastest
    t_f = np.asfortranarray(rng.random((4, 5, 6)).astype(np.float32))  # i fastest
    ghosted = rng.integers(0, 9, (5, 6, 7)).astype(np.int32)        # element field inside a ghost layer
    cells = ghosted[1:-1, 1:-1, 1:-1]
    d0 = C.domain(7, (4, 5, 6), [
        C.field("T", t_c),
        C.field("U", t_f, dtype=C.FLOAT32, layout=C.LAYOUT_FORTRAN, dims=(4, 5, 6)),
        C.field("cells", cells, association=C.ELEMENT, dtype=C.INT32, layout=C.LAYOUT_STRIDED,
                strides=cells.strides, address=cells.ctypes.data),
    ], origin=(0.5, 1.0, 1.5), spacing=(0.1, 0.2, 0.3))
    t2 = rng.random((2, 3, 2))
    d1 = C.domain(8, (2, 3, 2), [C.field("T", t2)])
    mesh = C.mesh([d0, d1])
    assert lib.insitu_execute(12, 0.25, ct.byref(mesh)) == C.OK, _err(lib)
    assert _err(lib) == ""
    got = m.CALLS[-1]
    assert (got["step"], got["time"]) == (12, 0.25)
    dom0, dom1 = got["mesh"]
    assert dom0["coordsets"]["coords"] == {"type": "uniform", "dims": {"i": 4, "j": 5, "k": 6},
                                           "origin": {"x": 0.5, "y": 1.0, "z": 1.5},
                                           "spacing": {"dx": 0.1, "dy": 0.2, "dz": 0.3}}
    assert dom0["topologies"] == {"mesh": {"type": "uniform", "coordset": "coords"}}
    assert dom0["state"] == {"domain_id": 7, "cycle": 12, "time": 0.25}
    assert dom1["state"]["domain_id"] == 8
    for name, src, assoc in (("T", t_c, "vertex"), ("U", t_f, "vertex"), ("cells", cells, "element")):
        f = dom0["fields"][name]
        assert f["association"] == assoc and f["topology"] == "mesh"
        v = f["values"]
        assert isinstance(v, np.ndarray) and v.dtype == src.dtype and v.shape == src.shape
        assert v.ctypes.data == src.ctypes.data and v.strides == src.strides  # the same memory, no copy
        assert not v.flags.writeable and not v.flags.owndata
        np.testing.assert_array_equal(v, src)
    assert dom1["fields"]["T"]["values"].ctypes.data == t2.ctypes.data
    t_c[0, 0, 0] = -1.0  # a view: the caller's later writes show through
    assert dom0["fields"]["T"]["values"][0, 0, 0] == -1.0
    # a rank may hold no domain
    assert lib.insitu_execute(13, 0.3, ct.byref(C.mesh([]))) == C.OK
    assert m.CALLS[-1]["mesh"] == []


def _bad_meshes():
    a = np.zeros((3, 4, 5))
    long_name = C.field("T", a)
    ct.memmove(ct.addressof(long_name), b"x" * C.NAME_MAX, C.NAME_MAX)
    no_fields = C.domain(0, (3, 4, 5), [])
    no_fields.nfields = 2
    neg = C.mesh([])
    neg.ndomains = -1
    null_domains = C.mesh([])
    null_domains.ndomains = 1
    return [
        ("null field pointer", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", None)])]),
         C.ERR_MESH, r"fields\[0\] 'T': data is NULL"),
        ("zero dims", C.mesh([C.domain(0, (3, 0, 5), [C.field("T", a)])]),
         C.ERR_MESH, r"dims=\(3, 0, 5\), each must be >= 1"),
        ("negative dims", C.mesh([C.domain(0, (-3, 4, 5), [C.field("T", a)])]),
         C.ERR_MESH, r"dims=\(-3, 4, 5\)"),
        ("unknown dtype", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, dtype=42)])]),
         C.ERR_MESH, r"dtype=42 is not one of INSITU_FLOAT32=1, INSITU_FLOAT64=2"),
        ("unset association", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, association=0)])]),
         C.ERR_MESH, r"association=0 is not one of INSITU_VERTEX=1, INSITU_ELEMENT=2"),
        ("unset layout", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, layout=0)])]),
         C.ERR_MESH, r"layout=0 is not one of INSITU_LAYOUT_C=1"),
        ("unknown memory", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, memory=5)])]),
         C.ERR_MESH, r"memory=5 is not one of INSITU_MEMORY_HOST=0, INSITU_MEMORY_CUDA=1"),
        ("field dims disagree", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, dims=(3, 4, 6))])]),
         C.ERR_MESH, r"dims=\(3, 4, 6\), a vertex field of this domain has dims \(3, 4, 5\)"),
        ("bad strides", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, layout=C.LAYOUT_STRIDED,
                                                                 strides=(160, -40, 8))])]),
         C.ERR_MESH, r"strides=\(160, -40, 8\) \(bytes\) must all be > 0"),
        ("strides with C layout", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, strides=(8, 24, 96))])]),
         C.ERR_MESH, r"given with INSITU_LAYOUT_C \(which implies \(160, 40, 8\)\)"),
        ("misaligned data", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", address=a.ctypes.data + 4)])]),
         C.ERR_MESH, r"is not aligned to its item size 8"),
        ("repeated field", C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a), C.field("T", a)])]),
         C.ERR_MESH, r"fields\[1\] 'T': name repeats"),
        ("name not terminated", C.mesh([C.domain(0, (3, 4, 5), [long_name])]),
         C.ERR_MESH, r"fields\[0\]: name is not NUL-terminated within INSITU_NAME_MAX=64"),
        ("missing fields array", C.mesh([no_fields]), C.ERR_MESH, r"fields is NULL but nfields=2"),
        ("negative domain count", neg, C.ERR_MESH, r"ndomains=-1 is negative"),
        ("missing domains array", null_domains, C.ERR_MESH, r"domains is NULL but ndomains=1"),
        ("element field of one layer", C.mesh([C.domain(0, (1, 4, 5), [C.field("c", a, association=C.ELEMENT)])]),
         C.ERR_MESH, r"an element field needs at least 2 vertices"),
        ("repeated domain id", C.mesh([C.domain(3, (3, 4, 5), [C.field("T", a)]),
                                       C.domain(3, (3, 4, 5), [C.field("T", a)])]),
         C.ERR_MESH, r"domain_id 3 repeats domains\[0\]"),
    ], a


def test_bad_meshes_give_mesh_errors_and_the_simulation_goes_on(lib, mock):
    m = mock()
    cases, keep = _bad_meshes()
    assert lib.insitu_execute(0, 0.0, None) == C.ERR_ARGUMENT and "mesh is NULL" in _err(lib)
    good = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", keep)])])
    for what, mesh, code, pattern in cases:
        n = len(m.CALLS)
        assert lib.insitu_execute(1, 0.0, ct.byref(mesh)) == code, (what, _err(lib))
        assert re.search(pattern, _err(lib)), (what, _err(lib))
        assert _err(lib).startswith("insitu_execute: invalid mesh: "), what
        assert len(m.CALLS) == n, f"{what}: the adaptor must not see an invalid mesh"
        assert lib.insitu_execute(2, 0.0, ct.byref(good)) == C.OK, what  # and the next step runs
        assert _err(lib) == ""


def test_several_problems_are_listed_together(lib, mock):
    mock()
    a = np.zeros((3, 4, 5))
    mesh = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, dtype=42), C.field("U", None),
                                          C.field("V", a, association=7)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(mesh)) == C.ERR_MESH
    msg = _err(lib)
    assert "fields[0] 'T': dtype=42" in msg and "fields[1] 'U': data is NULL" in msg
    assert "fields[2] 'V': association=7" in msg


@pytest.mark.skipif(__import__("insitu").arrays.cuda_available(),
                    reason="CuPy and a GPU are usable here: tests/gpu/test_capi_gpu.py covers device pointers")
def test_device_pointer_without_a_usable_gpu_is_device_unavailable(lib, mock):
    mock()
    a = np.zeros((3, 4, 5))
    mesh = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, memory=C.CUDA)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(mesh)) == C.ERR_DEVICE_UNAVAILABLE
    msg = _err(lib)
    assert "fields[0] 'T' is a CUDA device array, but CuPy" in msg and "INSITU_MEMORY_CUDA" in msg
    # an invalid mesh is reported as such before the device question
    bad = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a, memory=C.CUDA), C.field("U", a, dtype=0)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(bad)) == C.ERR_MESH
    assert lib.insitu_execute(1, 0.0, ct.byref(C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a)])]))) == C.OK


def test_results_and_getters(lib, mock):
    mock(stop_at=3, params={"alpha": 2.5, "beta": -1})
    a = np.zeros((3, 4, 5))
    mesh = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a)])])
    r = C.Results()
    assert lib.insitu_results(ct.byref(r)) == C.OK
    assert (r.stop, r.nerrors, r.step, r.nparams) == (0, 0, -1, 2)
    for step in range(4):
        assert lib.insitu_execute(step, 0.1 * step, ct.byref(mesh)) == C.OK
        assert lib.insitu_results(ct.byref(r)) == C.OK
        assert (r.stop, r.step) == (int(step >= 3), step)
    v, n = ct.c_double(), ct.c_int()
    assert lib.insitu_get_param(b"alpha", ct.byref(v)) == C.OK and v.value == 2.5
    assert lib.insitu_get_param(b"beta", ct.byref(v)) == C.OK and v.value == -1.0
    assert lib.insitu_get_param(b"gamma", ct.byref(v)) == C.ERR_NOT_FOUND and v.value == -1.0
    assert _err(lib) == "insitu_get_param: no steering parameter 'gamma'; parameters: 'alpha', 'beta'"
    assert lib.insitu_get_iso_count(b"p1", ct.byref(n)) == C.OK and n.value == 2
    assert lib.insitu_get_iso_value(b"p1", 1, ct.byref(v)) == C.OK and v.value == 0.75
    assert lib.insitu_get_iso_value(b"p1", 2, ct.byref(v)) == C.ERR_NOT_FOUND
    assert "pipeline 'p1' has 2 iso value(s); index 2 is out of range" in _err(lib)
    assert lib.insitu_get_iso_value(b"p9", 0, ct.byref(v)) == C.ERR_NOT_FOUND
    assert "no iso values for pipeline 'p9'; pipelines with iso values: 'p1'" in _err(lib)
    for call, msg in ((lambda: lib.insitu_results(None), "out is NULL"),
                      (lambda: lib.insitu_get_param(None, ct.byref(v)), "name is NULL"),
                      (lambda: lib.insitu_get_param(b"alpha", None), "value is NULL"),
                      (lambda: lib.insitu_get_iso_count(b"p1", None), "count is NULL"),
                      (lambda: lib.insitu_get_iso_value(None, 0, ct.byref(v)), "pipeline is NULL")):
        assert call() == C.ERR_ARGUMENT and msg in _err(lib)


def test_adaptor_failures_become_codes_not_crashes(lib, mock):
    a = np.zeros((3, 4, 5))
    mesh = C.mesh([C.domain(0, (3, 4, 5), [C.field("T", a)])])
    mock(require_fields=["rho"], raise_at=5)
    assert lib.insitu_execute(0, 0.0, ct.byref(mesh)) == C.ERR_EXECUTE
    assert _err(lib) == "insitu_execute: (p1/f1/contour) unknown field 'rho'; fields: 'T'"
    r = C.Results()
    assert lib.insitu_results(ct.byref(r)) == C.OK and r.nerrors == 1
    assert lib.insitu_execute(5, 0.0, ct.byref(mesh)) == C.ERR_EXECUTE  # the adaptor raised (forwarded)
    assert _err(lib) == "insitu_execute: ZeroDivisionError: mock pipeline raised at step 5"


def test_the_real_adaptor_reports_a_missing_field_as_a_mesh_error(lib, tmp_path, monkeypatch):
    monkeypatch.delenv("INSITU_ADAPTOR", raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pipelines: {p1: {f1: {type: contour, params: {field: T, iso_values: [0.5]}}}}\n"
                   "scenes: {s1: {plots: {p1: {type: pseudocolor, pipeline: p1}},"
                   " renders: {r1: {image_width: 8, image_height: 8}}}}\nlog: quiet\n")
    assert lib.insitu_initialize(str(cfg).encode(), _world()) == C.OK, _err(lib)
    try:
        rho = np.zeros((3, 4, 5))
        mesh = C.mesh([C.domain(0, (3, 4, 5), [C.field("rho", rho)])])
        assert lib.insitu_execute(4, 0.0, ct.byref(mesh)) == C.ERR_MESH
        assert "no field 'T' in the mesh; fields: rho" in _err(lib)
        r = C.Results()
        assert lib.insitu_results(ct.byref(r)) == C.OK and (r.nerrors, r.step, r.stop) == (1, 4, 0)
        n = ct.c_int()
        assert lib.insitu_get_iso_count(b"p1", ct.byref(n)) == C.OK and n.value == 1
    finally:
        assert lib.insitu_finalize() == C.OK


def test_a_failure_is_printed_once_with_the_rank(lib, mock, capfd):
    mock()
    capfd.readouterr()
    for _ in range(3):
        assert lib.insitu_execute(0, 0.0, None) == C.ERR_ARGUMENT
    err = capfd.readouterr().err
    assert err.count("insitu[rank 0]: insitu_execute: mesh is NULL (INSITU_ERR_ARGUMENT)") == 1, err


def test_status_names(lib):
    names = [lib.insitu_status_name(i).decode() for i in range(10)]
    assert names == ["INSITU_OK", "INSITU_ERR_ARGUMENT", "INSITU_ERR_CONFIG", "INSITU_ERR_MESH",
                     "INSITU_ERR_DEVICE_UNAVAILABLE", "INSITU_ERR_NOT_INITIALIZED", "INSITU_ERR_EXECUTE",
                     "INSITU_ERR_NOT_FOUND", "INSITU_ERR_PYTHON", "INSITU_ERR_UNKNOWN"]


# --------------------------------------------------------------------------- programs

N, STEPS, EVERY = 20, 10, 5


def heat_reference(n: int, steps: int) -> dict[int, np.ndarray]:
    """The examples' problem on one array: {step: T} for every EVERY-th step."""
    h = 1.0 / (n - 1)
    x = np.arange(n) * h
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")

    def blob(dx, dy, dz):
        return np.exp(-(dx * dx + dy * dy + dz * dz) / (2 * 0.12 * 0.12))

    T = blob(X - 0.35, Y - 0.5, Z - 0.5) + blob(X - 0.65, Y - 0.5, Z - 0.55)
    r = (h * h / 8) / (h * h)
    out = {0: T.copy()}
    for s in range(1, steps + 1):
        c = T[1:-1, 1:-1, 1:-1]
        Tn = T.copy()
        Tn[1:-1, 1:-1, 1:-1] = c + r * (T[:-2, 1:-1, 1:-1] + T[2:, 1:-1, 1:-1] + T[1:-1, :-2, 1:-1]
                                        + T[1:-1, 2:, 1:-1] + T[1:-1, 1:-1, :-2] + T[1:-1, 1:-1, 2:] - 6 * c)
        T = Tn
        if s % EVERY == 0:
            out[s] = T.copy()
    return out


def _program(build, kind):
    if kind == "fortran":
        _need_fortran(build)
        return build.heat_fortran
    return build.heat_cxx


def _heat(build, kind, nranks, cwd, config, *args, env=None, timeout=240):
    cmd = [*mpiexec(), "-n", str(nranks), _program(build, kind), str(config), "--n", str(N),
           "--steps", str(STEPS), "--every", str(EVERY), *map(str, args)]
    return _run(cmd, cwd, timeout=timeout, env_=env or _env(NUMBA_NUM_THREADS="1"))


REAL_CONFIG = {
    "pipelines": {"p1": {"f1": {"type": "contour", "params": {"field": "T", "iso_values": [0.5]}}}},
    "scenes": {"s1": {"plots": {"p1": {"type": "pseudocolor", "pipeline": "p1", "field": "T"}},
                      "renders": {"r1": {"image_width": 64, "image_height": 48, "image_prefix": "frames/heat_%04d",
                                         "camera": {"azimuth": 30, "elevation": 25}}}}},
    "extracts": {"h1": {"type": "hdf5", "params": {"path": "data/heat_%04d", "fields": ["T", "rank"]}}},
}


def _assemble(paths, n):
    """The global field from the domains the ranks handed over (HDF5 extract)."""
    import h5py

    T = np.full((n, n, n), np.nan)
    h = 1.0 / (n - 1)
    owners = set()
    for p in paths:
        with h5py.File(p) as f:
            for g in f.values():
                lo = np.rint(np.asarray(g.attrs["origin"]) / h).astype(int)
                t = g["T"][()]
                sl = tuple(slice(a, a + s) for a, s in zip(lo, t.shape))
                seen = ~np.isnan(T[sl])
                np.testing.assert_array_equal(T[sl][seen], t[seen])  # shared planes agree
                T[sl] = t
                rank = np.unique(g["rank"][()])
                assert rank.size == 1 and g["rank"].shape == tuple(s - 1 for s in t.shape)
                owners.add(int(rank[0]))
    return T, owners


@pytest.mark.mpi
@pytest.mark.parametrize("kind,nranks", [("cxx", 2), ("fortran", 2), ("cxx", 4), ("fortran", 4)])
def test_heat_example_renders_frames_of_the_exact_fields(build, tmp_path, kind, nranks):
    from PIL import Image

    cfg = tmp_path / "heat.yaml"
    cfg.write_text(json.dumps(REAL_CONFIG))
    p = _heat(build, kind, nranks, tmp_path, cfg)
    ref = heat_reference(N, STEPS)
    name = "heat_cxx" if kind == "cxx" else "heat_fortran"
    assert f"{name}: ranks={nranks} split=" in p.stdout and "insitu_initialize=INSITU_OK" in p.stdout
    for step in ref:
        assert re.search(rf"step {step} t=\S+ insitu_execute=INSITU_OK stop=0 errors=0 iso\[p1\]=0\.5", p.stdout), \
            p.stdout + p.stderr
        img = np.asarray(Image.open(tmp_path / "frames" / f"heat_{step:04d}.png"))
        assert img.shape[:2] == (48, 64)
        drawn = (img[..., :3] != img[0, 0, :3]).any(axis=-1).mean()
        assert 0.01 < drawn < 0.6, f"step {step}: {drawn:.3f} of the frame drawn"
        files = sorted(glob.glob(str(tmp_path / "data" / f"heat_{step:04d}*.h5")))
        assert len(files) == nranks
        T, owners = _assemble(files, N)
        assert owners == set(range(nranks))
        np.testing.assert_allclose(T, ref[step], rtol=0, atol=1e-12)
    total = float(re.search(r"done steps=10 sum\(T\)=\s*(\S+)", p.stdout).group(1))
    assert total == pytest.approx(ref[STEPS].sum(), rel=1e-12)


@pytest.mark.mpi
def test_heat_example_stops_and_follows_steering(build, tmp_path):
    steer = tmp_path / "steer.json"
    steer.write_text(json.dumps({"stop": True, "iso_values": {"p1": [0.3]}}))
    cfg = tmp_path / "heat.yaml"
    cfg.write_text(json.dumps({**REAL_CONFIG, "scenes": {}, "extracts": {}, "steering": {"file": str(steer)}}))
    p = _heat(build, "cxx", 2, tmp_path, cfg)
    assert re.search(r"step 0 t=\S+ insitu_execute=INSITU_OK stop=1 errors=0 iso\[p1\]=0\.3\n", p.stdout), p.stdout
    assert "stopped by the adaptor at step 0" in p.stdout and "done steps=0" in p.stdout


@pytest.mark.mpi
def test_embedded_python_is_the_configured_venv_without_path_or_virtual_env(build, tmp_path):
    """The interpreter baked at configure time, its venv and site-packages, with a bare PATH;
    the C++ example's strided block arrives as a view (the stand-in adaptor saves it)."""
    cfg = tmp_path / "mock.json"
    cfg.write_text(json.dumps({"mock": {"report": True, "out": str(tmp_path / "got"), "stop_at": 5}}))
    env = _env(PATH="/usr/bin:/bin", VIRTUAL_ENV=None, PYTHONHOME=None, INSITU_PYTHON=None,
               INSITU_ADAPTOR="capi_mock_adaptor", PYTHONPATH=CAPI_DIR)
    p = _heat(build, "cxx", 2, tmp_path, cfg, env=env)
    assert f"mock: size=2 prefix={sys.prefix} executable=" in p.stdout, p.stdout + p.stderr
    assert "stopped by the adaptor at step 5" in p.stdout
    ref = heat_reference(N, STEPS)
    for rank in range(2):
        got = np.load(tmp_path / "got" / f"r{rank}_s0005.npz")
        ni, nj, nk = got[f"d{rank}_dims"]
        addr, si, sj, sk, writeable, owndata, vertex = got[f"d{rank}_T_meta"]
        # split 2x1x1: the block's local array has a ghost layer on every side (k fastest)
        lj, lk = N + 2, N + 2
        assert (si, sj, sk) == (lj * lk * 8, lk * 8, 8) and not writeable and not owndata and vertex
        lo = np.rint(got[f"d{rank}_origin"] * (N - 1)).astype(int)
        np.testing.assert_allclose(got[f"d{rank}_T"], ref[5][lo[0]:lo[0] + ni, :, :], rtol=0, atol=1e-12)
        assert (ni, nj, nk) == (N // 2 + (rank == 0), N, N)
        assert list(got[f"d{rank}_state"]) == [5, pytest.approx(5 * (1.0 / (N - 1)) ** 2 / 8)]


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["cxx", "fortran"])
def test_the_simulation_goes_on_when_python_cannot_start_or_the_config_is_bad(build, tmp_path, kind):
    cfg = tmp_path / "heat.yaml"
    cfg.write_text(json.dumps(REAL_CONFIG))
    p = _heat(build, kind, 2, tmp_path, cfg, env=_env(INSITU_PYTHON=str(tmp_path / "no-python")))
    assert "insitu_initialize=INSITU_ERR_PYTHON" in p.stdout and "done steps=10" in p.stdout
    assert f"INSITU_PYTHON={tmp_path / 'no-python'} does not exist" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines: {p1: {f1: {type: contour}}}\n")
    p = _heat(build, kind, 2, tmp_path, bad)
    assert "insitu_initialize=INSITU_ERR_CONFIG" in p.stdout and "done steps=10" in p.stdout
    assert "insitu[rank 0]: insitu_initialize: invalid insitu configuration" in p.stderr
    assert "pipelines/p1/f1" in p.stderr


def test_the_package_works_from_the_build_tree(build):
    out = build.top / "from_build_tree"
    _run(["cmake", "-S", CAPI_DIR, "-B", out, f"-Dinsitu_DIR={build.lib_dir}", "-DCAPI_HEADER_ONLY=ON"], build.top)
    _run(["cmake", "--build", out, "--target", "header_check_c"], build.top)
    assert json.loads(_run([out / "header_check_c"], build.top).stdout)["INSITU_NAME_MAX"] == 64
    # the installed library finds libpython and libmpi without LD_LIBRARY_PATH (RUNPATH)
    ldd = _run(["ldd", str(build.prefix / "lib" / "libinsitu_adaptor.so")], build.top).stdout
    assert "not found" not in ldd and "libpython3" in ldd and "libmpi" in ldd
