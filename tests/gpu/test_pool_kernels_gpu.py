"""Kernel cache on the GPU: compile once, reload from disk in a new process, errors."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from insitu.pool import kernels
from insitu.pool.kernels import KernelCache, KernelCompileError, KernelNotFoundError, exec_kernel

cp = pytest.importorskip("cupy", reason="needs CuPy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SAXPY = r"""
extern "C" __global__ void saxpy(const float a, const float* __restrict__ x, float* __restrict__ y,
                                 const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

SCALE = r"""
template <typename T>
__global__ void scale(T* x, const T factor, const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
"""

CPP = r"""
__global__ void cpp_fill(float* x, const float v, const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
"""

BROKEN = r"""
extern "C" __global__ void broken(float* x) { x[0] = undefined_thing; }
"""

SCALE_NAMES = ("scale<float>", "scale<double>")


def saxpy_on(cache, n=1000, a=2.5):
    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    assert exec_kernel(cache, SAXPY, "saxpy", (np.float32(a), x, y, np.int64(n))) is None  # grid derived
    return float(cp.abs(y - (a * x + 1)).max())


def test_second_get_compiles_nothing(tmp_path):
    cache = KernelCache(str(tmp_path))
    k1 = cache.get(SAXPY, "saxpy")
    assert cache.stats() == {"compiles": 1, "memory_hits": 0, "disk_hits": 0, "callables": 0}
    k2 = cache.get(SAXPY, "saxpy")
    assert k2 is k1
    assert cache.stats()["compiles"] == 1 and cache.stats()["memory_hits"] == 1
    assert saxpy_on(cache) == 0.0
    assert cache.stats()["compiles"] == 1 and cache.stats()["memory_hits"] == 2
    # other options: another module
    cache.get(SAXPY, "saxpy", options=("-DUNUSED=1",))
    assert cache.stats()["compiles"] == 2
    files = os.listdir(tmp_path)
    assert sum(f.endswith(".json") for f in files) == 2
    assert not [f for f in files if f.startswith(".tmp-")]


def test_a_new_process_loads_from_disk_without_compiling(tmp_path):
    first = KernelCache(str(tmp_path))
    assert saxpy_on(first) == 0.0
    first.get(SCALE, "scale<float>", name_expressions=SCALE_NAMES)
    assert first.stats()["compiles"] == 2

    script = textwrap.dedent(f"""
        import json, sys
        import cupy as cp, numpy as np
        from insitu.pool.kernels import KernelCache, exec_kernel

        cache = KernelCache({str(tmp_path)!r})
        n, a = 1000, 2.5
        x = cp.arange(n, dtype=cp.float32)
        y = cp.ones(n, dtype=cp.float32)
        exec_kernel(cache, {SAXPY!r}, "saxpy", (np.float32(a), x, y, np.int64(n)))
        err = float(cp.abs(y - (a * x + 1)).max())
        after_saxpy = cache.stats()
        # the templated module: both instantiations from the one disk entry
        xf = cp.arange(n, dtype=cp.float32)
        xd = cp.arange(n, dtype=cp.float64)
        exec_kernel(cache, {SCALE!r}, "scale<float>", (xf, np.float32(3), np.int64(n)),
                    name_expressions={SCALE_NAMES!r})
        exec_kernel(cache, {SCALE!r}, "scale<double>", (xd, np.float64(0.5), np.int64(n)),
                    name_expressions={SCALE_NAMES!r})
        err_t = max(float(cp.abs(xf - 3 * cp.arange(n, dtype=cp.float32)).max()),
                    float(cp.abs(xd - 0.5 * cp.arange(n, dtype=cp.float64)).max()))
        print(json.dumps({{"err": err, "after_saxpy": after_saxpy, "err_t": err_t, "stats": cache.stats()}}))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["err"] == 0.0
    assert res["after_saxpy"] == {"compiles": 0, "memory_hits": 0, "disk_hits": 1, "callables": 0}
    assert res["err_t"] == 0.0
    assert res["stats"] == {"compiles": 0, "memory_hits": 1, "disk_hits": 2, "callables": 0}


def test_templated_kernel_after_an_in_process_disk_reload(tmp_path):
    KernelCache(str(tmp_path)).get(SCALE, "scale<double>", name_expressions=SCALE_NAMES)
    cache = KernelCache(str(tmp_path))  # same directory, nothing in memory
    k = cache.get(SCALE, "scale<double>", name_expressions=SCALE_NAMES)
    assert cache.stats() == {"compiles": 0, "memory_hits": 0, "disk_hits": 1, "callables": 0}
    x = cp.arange(10, dtype=cp.float64)
    cache.launch(k, None, 32, (x, np.float64(-2), np.int64(10)))
    cp.testing.assert_array_equal(x, -2 * cp.arange(10, dtype=cp.float64))
    # a name expression not listed is added (a module of its own)
    cache.get(SCALE, "scale<int>")
    assert cache.stats()["compiles"] == 1


def test_corrupt_entry_is_compiled_again(tmp_path):
    KernelCache(str(tmp_path)).get(SAXPY, "saxpy")
    (meta_name,) = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    binary = json.loads((tmp_path / meta_name).read_text())["binary"]
    (tmp_path / binary).write_bytes(b"garbage")
    cache = KernelCache(str(tmp_path))
    assert saxpy_on(cache) == 0.0
    assert cache.stats()["compiles"] == 1 and cache.stats()["disk_hits"] == 0
    assert KernelCache(str(tmp_path)).get(SAXPY, "saxpy") is not None  # rewritten whole


def test_compile_error_shows_the_nvrtc_log(tmp_path):
    cache = KernelCache(str(tmp_path))
    with pytest.raises(KernelCompileError) as e:
        cache.get(BROKEN, "broken")
    msg = str(e.value)
    assert "'broken'" in msg and "undefined_thing" in msg and "error" in msg
    assert "undefined_thing" in e.value.log and e.value.function_name == "broken"
    assert cache.stats()["compiles"] == 0
    assert os.listdir(tmp_path) == []  # nothing stored


def test_missing_function_is_a_clear_error(tmp_path):
    cache = KernelCache(str(tmp_path))
    with pytest.raises(KernelNotFoundError, match=r"'sxpy'.*\['saxpy'\]"):
        cache.get(SAXPY, "sxpy")
    # a C++ (not extern "C") kernel: found through its name expression only
    with pytest.raises(KernelNotFoundError, match="name expression"):
        cache.get(CPP, "cpp_fill")
    k = cache.get(CPP, "cpp_fill", name_expressions=("cpp_fill",))
    x = cp.zeros(300, cp.float32)
    cache.launch(k, None, None, (x, np.float32(7), np.int64(300)))
    assert float(x.min()) == 7.0


def test_host_arrays_are_refused(tmp_path):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match=r"args\[1\] is a host array"):
        exec_kernel(KernelCache(str(tmp_path)), SAXPY, "saxpy", (np.float32(2), x, cp.asarray(x), np.int64(4)))


def test_cupy_kernels_pass_through(tmp_path):
    cache = KernelCache(str(tmp_path))
    raw = cp.RawKernel(SAXPY, "saxpy")
    x = cp.arange(500, dtype=cp.float32)
    y = cp.zeros(500, cp.float32)
    assert exec_kernel(cache, raw, None, (np.float32(2), x, y, np.int64(500)), block=128) is None
    cp.testing.assert_array_equal(y, 2 * x)
    twice = cp.ElementwiseKernel("T x", "T y", "y = 2 * x", "twice")
    cp.testing.assert_array_equal(exec_kernel(cache, twice, None, (x,)), 2 * x)
    assert cache.stats() == {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "callables": 2}


def test_registered_name_on_device_arrays():
    from render.contour import marching_cubes

    n = 24
    g = np.linspace(-1, 1, n)
    vol = cp.asarray(np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2))
    got = exec_kernel(None, "contour.marching_cubes", None, (vol,), kwargs={"level": 0.6})
    want = marching_cubes(vol, 0.6)
    for a, b in zip(got, want):
        assert isinstance(a, cp.ndarray)
        cp.testing.assert_array_equal(a, b)
    assert kernels.lookup("contour.marching_cubes") is marching_cubes
