"""`insitu warmup` on a GPU machine: after it, a fresh process's first device execute compiles no CUDA kernel.

CuPy compiles a kernel source once per GPU architecture and keeps the binary in its disk cache
(``CUPY_CACHE_DIR``), a file per compile: a process that compiles nothing adds no file there.
"""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("cupy", reason="needs CuPy")

# Contour + pseudocolor and a volume plot, as the demo draws them (examples/eikonal_insitu.yaml).
CONFIG = """
pipelines:
  pl: {c: {type: contour, params: {field: r, iso_values: [0.8]}}}
scenes:
  s:
    plots:
      p: {type: pseudocolor, pipeline: pl, field: r, min_value: 0.7, max_value: 0.9}
      v: {type: volume, field: r, min_value: 0.0, max_value: 2.1}
    renders: {r: {image_width: 128, image_height: 96, image_prefix: %s}}
"""

# The job's first step in a fresh process: a device field of another size than the warmup's meshes.
JOB = """
import json, sys, time
import cupy as cp, numpy as np
import adaptors
n = 40
x = np.linspace(-1.2, 1.2, n)
r = cp.asarray(np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2).astype(np.float32))
mesh = adaptors.uniform({"r": r}, origin=(-1.2,) * 3, spacing=(x[1] - x[0],) * 3)
with adaptors.Adaptor(sys.argv[1]) as a:
    t0 = time.perf_counter()
    ok = a.execute(0, 0.0, mesh)
    cp.cuda.Device().synchronize()
    t = time.perf_counter() - t0
    errors = a.results()["errors"]
print(json.dumps({"ok": bool(ok), "first": t, "errors": errors}))
"""


def _files(d):
    return {os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs}


_GLOBAL = re.compile(r"__global__\s+void\s+(\w+)")


def _kernels(d, names):
    """The kernels in the CUDA sources CuPy saved beside the binaries `names`
    (``CUPY_CACHE_SAVE_CUDA_SOURCE=1``): what a failed check names."""
    out = []
    for n in sorted(x for x in names if not x.endswith(".cu")):
        for f in sorted(_files(d)):
            if f.startswith(n.split(".")[0]) and f.endswith(".cu"):
                src = open(os.path.join(d, f)).read()
                at = src.find("__global__")
                out.append(f"{n}: {_GLOBAL.findall(src)} {src[at:at + 600]!r}")
    return out


def test_after_warmup_the_first_device_execute_compiles_nothing(tmp_path):
    cupy_cache, numba_cache = tmp_path / "cupy", tmp_path / "numba"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG % (tmp_path / "frame_%d"))
    env = {**os.environ, "CUPY_CACHE_DIR": str(cupy_cache), "NUMBA_CACHE_DIR": str(numba_cache),
           "CUPY_CACHE_SAVE_CUDA_SOURCE": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    w = subprocess.run([sys.executable, "-m", "insitu", "warmup", str(cfg), "--dtype", "float32", "--gpu"],
                       capture_output=True, text=True, env=env, timeout=1200, cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr[-4000:]
    assert f"CUDA kernels compiled too (device arrays); CuPy's cache: {cupy_cache}" in w.stdout, w.stdout
    warmed, warmed_numba = _files(cupy_cache), _files(numba_cache)
    assert warmed, "the warmup wrote no CUDA binary into CUPY_CACHE_DIR"
    job = subprocess.run([sys.executable, "-c", JOB, str(cfg)], capture_output=True, text=True, env=env,
                         timeout=600, cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-4000:]
    out = json.loads(job.stdout.strip().splitlines()[-1])
    assert out["ok"], out["errors"]
    assert os.path.exists(tmp_path / "frame_0.png")
    new = _files(cupy_cache) - warmed
    assert not new, "CUDA kernels compiled:\n" + "\n".join(_kernels(cupy_cache, new) or sorted(new))
    # Nor a Numba kernel (what the device path runs on the host).
    assert _files(numba_cache) == warmed_numba, f"Numba kernels compiled: {sorted(_files(numba_cache) - warmed_numba)}"
    print(f"first device execute after warmup: {out['first']:.2f} s")


def test_a_cold_process_does_compile_into_the_cache(tmp_path):
    # The check above can fail: without the warmup, the same first execute writes CUDA binaries.
    cupy_cache = tmp_path / "cupy"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG % (tmp_path / "frame_%d"))
    env = {**os.environ, "CUPY_CACHE_DIR": str(cupy_cache), "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    job = subprocess.run([sys.executable, "-c", JOB, str(cfg)], capture_output=True, text=True, env=env,
                         timeout=1200, cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-4000:]
    assert json.loads(job.stdout.strip().splitlines()[-1])["ok"]
    assert _files(cupy_cache), "a cold first device execute wrote nothing into CUPY_CACHE_DIR"
