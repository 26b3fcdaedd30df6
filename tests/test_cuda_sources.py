"""The CUDA kernels (every CuPy RawModule source of the library) compile for the GPU
node's architecture (sm_90) with NVRTC, here, without a GPU: a compile error found here
costs no device time. NVRTC comes from the nvidia-cuda-nvrtc wheel (the [test] extra);
its library is called through ctypes."""

import ctypes
import glob
import os

import numpy as np
import pytest

from insitu import ranges
from insitu.transports import p2p
from render.cells import _contour_gpu as cells
from render.contour import _gpu
from render.raster import _gpu as raster
from render.volume import _gpu as volume

ARCH = "sm_90"  # H100 and H200


@pytest.fixture(scope="module")
def nvrtc():
    import nvidia  # the nvidia-cuda-nvrtc wheel, a dependency of the [test] extra

    found = [p for d in nvidia.__path__ for p in sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so.*")))
             if "builtins" not in p and ".alt." not in p]
    assert found, f"no libnvrtc under {list(nvidia.__path__)}: is the nvidia-cuda-nvrtc wheel installed whole?"
    lib = ctypes.CDLL(found[-1])
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def compile_cuda(lib, code: str, names, options, arch: str = ARCH) -> tuple[int, str, dict]:
    """NVRTC's result code, log and the lowered (mangled) name of each of `names`."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"insitu.cu", 0, None, None) == 0
    try:
        for n in names:
            assert lib.nvrtcAddNameExpression(prog, n.encode()) == 0
        opts = [f"-arch={arch}".encode(), *(o.encode() for o in options)]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        lowered = {}
        if rc == 0:
            for n in names:
                out = ctypes.c_char_p()
                assert lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(out)) == 0, n
                lowered[n] = out.value.decode()
        return rc, log.value.decode(errors="replace"), lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_a_compile_error_is_reported(nvrtc):
    rc, log, lowered = compile_cuda(nvrtc, "__global__ void k() { int d = 0; int d = 1; }", ["k"], ())
    assert rc != 0 and "already been declared" in log and not lowered


@pytest.mark.parametrize("dtype", sorted(_gpu._TYPES, key=str), ids=str)
def test_marching_cubes_kernels_compile(nvrtc, dtype):
    code, names, options = _gpu.source(_gpu._TYPES[np.dtype(dtype)])
    rc, log, lowered = compile_cuda(nvrtc, code, names, options)
    assert rc == 0, nvrtc.nvrtcGetErrorString(rc).decode() + "\n" + log
    assert set(lowered) == set(names) and all(v.startswith("_Z") for v in lowered.values())


@pytest.mark.parametrize("id_t, val_t", [("int", "float"), ("long long", "double"), ("int", "double")])
def test_cell_contour_kernels_compile(nvrtc, id_t, val_t):
    code, names, options = cells.source(id_t, val_t, "float", "float")
    rc, log, _ = compile_cuda(nvrtc, code, names, options)
    assert rc == 0, log


@pytest.mark.parametrize("module", [ranges, volume, raster, p2p], ids=lambda m: m.__name__)
def test_other_kernels_compile(nvrtc, module):
    code, names, options = module.source()
    rc, log, lowered = compile_cuda(nvrtc, code, names, options)
    assert rc == 0, log
    assert set(lowered) == set(names)
