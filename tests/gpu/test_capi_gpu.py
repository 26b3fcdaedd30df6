"""The C API with CUDA memory: a device pointer handed to insitu_execute reaches the adaptor
as a CuPy array over the same memory, with no host transfer.

The library is built with CMake against this machine's Python and MPI (FindMPI: the mpicc on
PATH; mpi4py must use the same MPI). The adaptor is the stand-in module of tests/capi, which
keeps what it receives; one test runs the real adaptor on device fields.
"""

from __future__ import annotations

import ctypes as ct
import json
import os
import sys

import numpy as np
import pytest

import insitu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPI_DIR = os.path.join(ROOT, "tests", "capi")
sys.path.insert(0, CAPI_DIR)
import capi_build  # noqa: E402
import capi_ctypes as C  # noqa: E402


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    missing = capi_build.missing_tools()
    if missing:
        pytest.skip("building the C API needs " + ", ".join(missing))
    from mpi4py import MPI  # MPI_Init, as the simulation would

    assert MPI.Is_initialized()
    b = capi_build.build(tmp_path_factory.mktemp("capi_gpu"), consumers=False, fortran=False)
    return C.load(b.lib)


@pytest.fixture
def mock(lib, tmp_path, monkeypatch):
    monkeypatch.setenv("INSITU_ADAPTOR", "capi_mock_adaptor")
    monkeypatch.syspath_prepend(CAPI_DIR)
    import capi_mock_adaptor

    cfg = tmp_path / "mock.json"
    cfg.write_text(json.dumps({"mock": {}}))
    from mpi4py import MPI

    assert lib.insitu_initialize(str(cfg).encode(), MPI.COMM_WORLD.py2f()) == C.OK, lib.insitu_last_error()
    yield capi_mock_adaptor
    lib.insitu_finalize()


def _dtype_code(dt):
    return {np.float32: C.FLOAT32, np.float64: C.FLOAT64, np.int32: C.INT32}[np.dtype(dt).type]


def _device_field(name, a, *, device=0, association=C.VERTEX):
    return C.field(name, association=association, dtype=_dtype_code(a.dtype), memory=C.CUDA, device=device,
                   layout=C.LAYOUT_STRIDED, strides=a.strides, address=a.data.ptr)


def test_device_fields_arrive_as_cupy_views_without_host_transfers(lib, mock):
    import cupy as cp

    with cp.cuda.Device(0):
        t = cp.random.random((8, 9, 10), dtype=cp.float32)                  # C order
        u = cp.asfortranarray(cp.random.random((8, 9, 10)))                 # i fastest
        ghosted = cp.arange(9 * 10 * 11, dtype=cp.int32).reshape(9, 10, 11)
        cells = ghosted[1:-1, 1:-1, 1:-1]                                   # strided element field
        cp.cuda.get_current_stream().synchronize()  # the caller makes the data ready
    mesh = C.mesh([C.domain(0, (8, 9, 10), [_device_field("T", t), _device_field("U", u),
                                            _device_field("cells", cells, association=C.ELEMENT)])])
    with insitu.arrays.count_transfers() as moved:
        assert lib.insitu_execute(3, 0.5, ct.byref(mesh)) == C.OK, lib.insitu_last_error()
    assert moved.calls == 0 and moved.scalar_reads == 0
    fields = mock.CALLS[-1]["mesh"][0]["fields"]
    for name, src in (("T", t), ("U", u), ("cells", cells)):
        v = fields[name]["values"]
        assert isinstance(v, cp.ndarray)
        assert v.data.ptr == src.data.ptr and v.strides == src.strides and v.shape == src.shape
        assert v.dtype == src.dtype and v.device.id == 0
        assert bool(cp.all(v == src))  # compared on the device
    t[0, 0, 0] = -1  # a view: the simulation's later writes show through
    assert float(fields["T"]["values"][0, 0, 0]) == -1


@pytest.mark.gpus(2)
def test_device_ordinal_is_honoured(lib, mock):
    import cupy as cp

    with cp.cuda.Device(1):
        t = cp.ones((4, 5, 6))
    mesh = C.mesh([C.domain(0, (4, 5, 6), [_device_field("T", t, device=1)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(mesh)) == C.OK, lib.insitu_last_error()
    v = mock.CALLS[-1]["mesh"][0]["fields"]["T"]["values"]
    assert v.device.id == 1 and v.data.ptr == t.data.ptr


def test_memory_space_must_match_the_pointer(lib, mock):
    import cupy as cp

    host = np.zeros((4, 5, 6))
    dev = cp.zeros((4, 5, 6))
    bad_host = C.mesh([C.domain(0, (4, 5, 6), [C.field("T", host, memory=C.CUDA)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(bad_host)) == C.ERR_MESH
    assert b"is not CUDA device or managed memory" in lib.insitu_last_error()
    bad_dev = C.mesh([C.domain(0, (4, 5, 6), [C.field("T", address=dev.data.ptr)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(bad_dev)) == C.ERR_MESH  # host memory claimed: never read
    assert b"is CUDA device memory (device 0) but memory=INSITU_MEMORY_HOST" in lib.insitu_last_error()
    n = cp.cuda.runtime.getDeviceCount()
    bad_ordinal = C.mesh([C.domain(0, (4, 5, 6), [_device_field("T", dev, device=n)])])
    assert lib.insitu_execute(0, 0.0, ct.byref(bad_ordinal)) == C.ERR_MESH
    assert f"is on CUDA device 0 but device={n}".encode() in lib.insitu_last_error()


def test_the_real_adaptor_renders_device_fields(lib, tmp_path, monkeypatch):
    import cupy as cp

    pytest.importorskip("OpenGL", reason="PyOpenGL is needed to render (make gpu-test's environment has it)")
    from mpi4py import MPI

    monkeypatch.delenv("INSITU_ADAPTOR", raising=False)
    prefix = tmp_path / "frame_%04d"
    cfg = {"pipelines": {"p1": {"f1": {"type": "contour", "params": {"field": "T", "iso_values": [0.3]}}}},
           "scenes": {"s1": {"plots": {"p1": {"type": "pseudocolor", "pipeline": "p1"}},
                             "renders": {"r1": {"image_width": 64, "image_height": 64, "image_prefix": str(prefix)}}}}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    assert lib.insitu_initialize(str(path).encode(), MPI.COMM_WORLD.py2f()) == C.OK, lib.insitu_last_error()
    try:
        x = cp.linspace(-1, 1, 24)
        t = cp.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
        cp.cuda.get_current_stream().synchronize()
        mesh = C.mesh([C.domain(0, (24, 24, 24), [_device_field("T", t)], spacing=(2 / 23,) * 3)])
        assert lib.insitu_execute(7, 0.0, ct.byref(mesh)) == C.OK, lib.insitu_last_error()
        assert (tmp_path / "frame_0007.png").exists()
    finally:
        lib.insitu_finalize()
