"""Kernel cache and registry (CPU): built-in names, callables, cache keys, disk entries."""

import json
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from insitu import arrays
from insitu.arrays import DeviceUnavailableError
from insitu.pool import kernels
from insitu.pool.kernels import KernelCache, atomic_write, cache_key, exec_kernel, lookup, register

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLATFORM = ("14.2.0", "90", "13.0")
SAXPY = r"""
extern "C" __global__ void saxpy(const float a, const float* x, float* y, const long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
no_gpu = pytest.mark.skipif(arrays.cuda_available(), reason="checks the behaviour without CuPy / a CUDA device")


def sphere(n=20, r=0.6):
    x = np.linspace(-1, 1, n)
    return np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2), r


def run_python(code, env=None):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=120)


# --------------------------------------------------------------------------- registry


def test_builtins_are_registered_and_resolve_to_the_library_functions():
    from render.contour import marching_cubes
    from render.volume import ray_cast
    from solvers.eikonal import update_block

    assert {"eikonal.update", "contour.marching_cubes", "volume.ray_cast"} <= set(kernels.names())
    assert lookup("contour.marching_cubes") is marching_cubes
    assert lookup("volume.ray_cast") is ray_cast
    assert lookup("eikonal.update") is update_block


def test_registered_marching_cubes_equals_the_direct_call():
    vol, r = sphere()
    cache = KernelCache(cache_dir="/nonexistent/never/created")
    got = exec_kernel(cache, "contour.marching_cubes", None, (vol,), kwargs={"level": r})
    from render.contour import marching_cubes

    want = marching_cubes(vol, r)
    assert len(got) == len(want) == 3 and len(got[0]) > 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert cache.stats() == {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "callables": 1}
    assert not os.path.exists("/nonexistent/never/created")


def test_importing_the_kernel_module_imports_no_algorithm():
    out = run_python("""
        import sys
        import insitu.pool.kernels as k
        assert k.names()
        print(sorted(m for m in ("render.contour", "render.volume", "solvers.eikonal") if m in sys.modules))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_builtins_come_from_the_entry_points_this_project_declares():
    import tomllib

    from insitu import plugins

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        table = tomllib.load(f)["project"]["entry-points"]["insitu.kernels"]
    # the installed metadata is the project's (pip install -e . refreshes it after a change)
    assert plugins.declared(kernels.KERNEL_GROUP) == table
    assert set(table) <= set(kernels.names())
    with pytest.raises(ValueError, match="'contour.marching_cubes' is already registered"):
        register("contour.marching_cubes", lambda v, level: v)


FAKE_DIST = {
    "fakekern/__init__.py": "def triple(x):\n    return 3 * x\n",
    "fakekern-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakekern\nVersion: 1.0\n",
    "fakekern-1.0.dist-info/entry_points.txt": ("[insitu.kernels]\nfake.triple = fakekern:triple\n"
                                                 "fake.broken = fakekern.triple\n"),
}


def test_an_installed_package_adds_kernels_through_entry_points(tmp_path):
    for rel, text in FAKE_DIST.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = run_python(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        from insitu.pool import kernels
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            names = kernels.names()
        assert "fake.triple" in names and "contour.marching_cubes" in names, names
        assert "fake.broken" not in names and any("fake.broken" in str(x.message) for x in w), w
        assert "fakekern" not in sys.modules  # declared, imported on first use
        print(kernels.exec_kernel(None, "fake.triple", None, (2,)), "fakekern" in sys.modules)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "True"]


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(KeyError, match="contour.marching_cubes") as e:
        lookup("contour.marching_squares")
    assert "eikonal.update" in str(e.value) and "volume.ray_cast" in str(e.value)
    assert "entry points in group 'insitu.kernels'" in str(e.value)
    with pytest.raises(KeyError, match="unknown kernel name 'nope.nope'"):
        exec_kernel(None, "nope.nope", None, ())


def test_register_lookup_unregister():
    def double(x):
        return 2 * x

    register("test.double", double)
    try:
        register("test.double", double)  # the same function again: fine
        assert lookup("test.double") is double
        assert exec_kernel(None, "test.double", None, (np.arange(3),)).tolist() == [0, 2, 4]
        with pytest.raises(ValueError, match="already registered"):
            register("test.double", lambda x: x)
        register("test.double", "numpy:negative", replace=True)  # lazily imported
        assert lookup("test.double") is np.negative
    finally:
        kernels.unregister("test.double")
    assert "test.double" not in kernels.names()
    with pytest.raises(ValueError, match="dotted identifiers"):
        register("has space", double)
    with pytest.raises(TypeError):
        register("test.notcallable", 3)
    with pytest.raises(ValueError, match="module:attribute"):
        register("test.badpath", "numpy.negative")


# --------------------------------------------------------------------------- callables


@numba.njit(cache=False)
def _add_njit(a, b):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = a[i] + b
    return out


def _scale_in_place(block, factor):
    block *= factor


def test_python_and_numba_callables_run_through_exec_kernel():
    cache = KernelCache(cache_dir="/nonexistent")
    a = np.arange(5.0)
    np.testing.assert_array_equal(exec_kernel(cache, _add_njit, None, (a, 1.5)), a + 1.5)
    assert exec_kernel(cache, _scale_in_place, "ignored", (a, 2.0)) is None  # in place
    np.testing.assert_array_equal(a, np.arange(5.0) * 2)
    np.testing.assert_array_equal(exec_kernel(cache, np.round, None, (a / 3,), kwargs={"decimals": 1}),
                                  np.round(a / 3, 1))
    assert cache.get_callable(_add_njit) is _add_njit
    assert cache.stats() == {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "callables": 4}


def test_launch_settings_are_refused_for_callables():
    for bad in ({"grid": 4}, {"block": 128}, {"options": ("-O3",)}, {"shared_mem": 64}):
        with pytest.raises(TypeError, match="do not apply"):
            exec_kernel(None, _scale_in_place, None, (np.ones(3), 2.0), **bad)
    with pytest.raises(TypeError, match="expected CUDA source"):
        exec_kernel(None, 42, None, ())
    with pytest.raises(TypeError, match="callable"):
        KernelCache().get_callable("not callable")


def test_numba_cuda_kernel_gets_a_derived_grid_in_the_simulator():
    out = run_python("""
        import numpy as np
        from numba import cuda
        from insitu.pool.kernels import KernelCache, exec_kernel

        @cuda.jit
        def add_one(x, n):
            i = cuda.grid(1)
            if i < n:
                x[i] += 1.0

        x = np.zeros(300)
        cache = KernelCache("/nonexistent")
        exec_kernel(cache, add_one, None, (x, x.size), block=128)   # grid (3,) derived
        exec_kernel(cache, add_one, None, (x, x.size), grid=1, block=64)  # covers 64 only
        print(int(x.sum()), cache.stats()["callables"])
    """, env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(300 + 64), "2"]


# --------------------------------------------------------------------------- CUDA source


def test_cache_key():
    k = cache_key(SAXPY, ("-std=c++17",), (), platform=PLATFORM)
    assert len(k) == 64 and int(k, 16) >= 0
    assert cache_key(SAXPY, ["-std=c++17"], [], platform=list(PLATFORM)) == k  # same inputs, any sequence
    assert cache_key(SAXPY, ("-std=c++14",), (), platform=PLATFORM) != k  # other options
    assert cache_key(SAXPY, (), (), platform=PLATFORM) != k
    assert cache_key(SAXPY, ("-std=c++17",), ("saxpy",), platform=PLATFORM) != k  # name expressions
    assert cache_key(SAXPY + " ", ("-std=c++17",), (), platform=PLATFORM) != k  # source
    assert cache_key(SAXPY, ("-std=c++17",), (), platform=("14.2.0", "80", "13.0")) != k  # other GPU
    assert cache_key(SAXPY, ("-std=c++17",), (), platform=("13.6.0", "90", "13.0")) != k  # other CuPy
    with pytest.raises(TypeError):
        cache_key(SAXPY, (1,), (), platform=PLATFORM)


@no_gpu
def test_cuda_source_without_a_gpu_raises_device_unavailable(tmp_path):
    cache = KernelCache(str(tmp_path / "k"))
    with pytest.raises(DeviceUnavailableError, match="'saxpy'.*needs CuPy and a CUDA device"):
        cache.get(SAXPY, "saxpy")
    x = np.ones(4, np.float32)
    with pytest.raises(DeviceUnavailableError, match="saxpy"):
        exec_kernel(cache, SAXPY, "saxpy", (np.float32(2), x, x.copy(), np.int64(4)))
    with pytest.raises(DeviceUnavailableError):
        cache.platform()
    assert cache.stats()["compiles"] == 0
    assert not (tmp_path / "k").exists()


def test_cuda_source_needs_a_function_name():
    with pytest.raises(ValueError, match="function_name"):
        exec_kernel(None, SAXPY, None, ())
    with pytest.raises(TypeError, match="positional"):
        exec_kernel(None, SAXPY, "saxpy", (), kwargs={"a": 1})


def test_host_arrays_are_refused_for_cuda_source_with_the_argument_named():
    x = np.ones(4, np.float32)
    args = kernels._device_args((np.float32(2), 3, 1.5, None), "saxpy")
    assert args[:3] == (np.float32(2), 3, 1.5)
    with pytest.raises(TypeError, match=r"'saxpy': args\[1\] is a host array \(ndarray\)"):
        kernels._device_args((np.float32(2), x, x, np.int64(4)), "saxpy")
    with pytest.raises(TypeError, match=r"args\[0\] is a host array \(memoryview\)"):
        kernels._device_args((memoryview(b"abcd"),), "k")


def test_launch_config():
    x = np.zeros(1000)
    assert kernels._launch_config(None, None, (np.float32(1), x), name="k") == ((4,), (256,))
    assert kernels._launch_config(None, 128, (x,), name="k") == ((8,), (128,))
    assert kernels._launch_config((2, 3), (8, 8), (x,), name="k") == ((2, 3), (8, 8))
    assert kernels._launch_config(None, None, (np.zeros((0, 3)),), name="k") == (None, (256,))  # nothing to run
    with pytest.raises(ValueError, match="2-D block"):
        kernels._launch_config(None, (16, 16), (x,), name="k")
    with pytest.raises(ValueError, match="no array argument"):
        kernels._launch_config(None, None, (1, 2.0), name="k")
    with pytest.raises(ValueError, match="positive"):
        kernels._launch_config(0, None, (x,), name="k")


def test_global_function_names_are_found_for_error_messages():
    src = SAXPY + """
        // __global__ void commented(int)
        template <typename T> __global__ void __launch_bounds__(256) scale(T* x) {}
        __global__ void
        cpp_fill(float* x) {}
    """
    assert kernels._global_functions(src) == ["saxpy", "scale", "cpp_fill"]


# --------------------------------------------------------------------------- disk entries


def test_disk_entry_round_trip_and_rejections(tmp_path):
    cache = KernelCache(str(tmp_path / "k"))
    key = cache_key(SAXPY, (), ("scale<float>",), platform=PLATFORM)
    assert cache._fetch(key, PLATFORM) is None  # nothing yet
    binary = b"\x7fELF" + bytes(range(256)) * 4
    assert cache._store(key, binary, {"scale<float>": "_Z5scaleIfEvPT_"}, platform=PLATFORM,
                        name_expressions=("scale<float>",), kernels=["scale"])
    meta = json.loads((tmp_path / "k" / f"{key}.json").read_text())
    assert sorted(os.listdir(tmp_path / "k")) == sorted([f"{key}.json", f"{key}.{meta['sha256'][:16]}.cubin"])
    assert meta["binary"].endswith(".cubin") and meta["kernels"] == ["scale"]
    assert cache._fetch(key, PLATFORM) == (binary, {"scale<float>": "_Z5scaleIfEvPT_"})

    # a new object (a new process) on the same directory finds it
    assert KernelCache(str(tmp_path / "k"))._fetch(key, PLATFORM)[0] == binary
    # made for another GPU: ignored
    assert cache._fetch(key, ("14.2.0", "80", "13.0")) is None
    # a corrupt binary: ignored
    with open(tmp_path / "k" / meta["binary"], "r+b") as f:
        f.seek(10)
        f.write(b"\0\0\0")
    assert cache._fetch(key, PLATFORM) is None
    # a truncated description: ignored
    (tmp_path / "k" / f"{key}.json").write_text('{"version": 1, "binary": ')
    assert cache._fetch(key, PLATFORM) is None
    # a description pointing outside the directory: ignored
    meta["binary"] = "../elsewhere.cubin"
    (tmp_path / "k" / f"{key}.json").write_text(json.dumps(meta))
    assert cache._fetch(key, PLATFORM) is None
    # PTX is stored as .ptx
    assert cache._store("k2", b"//\n.version 8.0\n\0", {}, platform=PLATFORM)
    assert any(f.endswith(".ptx") for f in os.listdir(tmp_path / "k"))


def test_store_in_an_unwritable_place_warns_and_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = KernelCache(str(blocker / "sub"))  # a directory under a file: cannot be made
    with pytest.warns(RuntimeWarning, match="could not store"):
        assert not cache._store("k", b"\x7fELF", {}, platform=PLATFORM)


def test_atomic_write(tmp_path, monkeypatch):
    p = tmp_path / "a.bin"
    atomic_write(str(p), b"first")
    assert p.read_bytes() == b"first"
    atomic_write(str(p), b"second")
    assert p.read_bytes() == b"second"
    assert os.listdir(tmp_path) == ["a.bin"]  # no temporary file left

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(str(p), b"third")
    assert p.read_bytes() == b"second"  # the old file stays whole
    assert os.listdir(tmp_path) == ["a.bin"]


def test_default_directory_and_stats(tmp_path, monkeypatch):
    monkeypatch.setenv("INSITU_KERNEL_CACHE", str(tmp_path / "env"))
    cache = KernelCache()
    assert cache.cache_dir == str(tmp_path / "env")
    assert not (tmp_path / "env").exists()  # made when something is stored
    assert cache.stats() == {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "callables": 0}
    monkeypatch.delenv("INSITU_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert KernelCache().cache_dir == str(tmp_path / "xdg" / "insitu" / "kernels")
    assert KernelCache("~/x").cache_dir == os.path.expanduser("~/x")
    assert kernels.default_cache() is kernels.default_cache()
    import pickle

    c2 = pickle.loads(pickle.dumps(cache))
    assert c2.cache_dir == cache.cache_dir and c2.stats()["callables"] == 0
