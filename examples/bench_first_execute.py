"""How long the first ``execute`` of a fresh process takes: cold Numba cache vs after ``insitu warmup``.

    python examples/bench_first_execute.py              # the demo's configuration and contour + pseudocolor
    python examples/bench_first_execute.py --all        # also after `insitu warmup` with no configuration

Every measurement is a fresh process with its own empty ``NUMBA_CACHE_DIR``: *cold* runs the
pipeline straight away (every kernel compiles inside the first ``execute``); *warmup* first
runs ``insitu warmup CONFIG`` (timed) in another process, then the pipeline; *cache read-only*
does the same with the warmed cache made read-only first (a cache warmed at install time);
*installed read-only* runs the packages from a read-only copy (byte-compiled first, as pip
does), the cache being a writable ``NUMBA_CACHE_DIR`` warmed by ``insitu warmup`` run from that
copy (the README's recipe for containers and shared software trees). ``initialize`` includes
Numba's one-time set-up of its CPU target (about 0.5 s: it loads SciPy's BLAS), which the
adaptor does there rather than in the first step. The pipelines draw a 32^3 block with one
ghost layer, as the demo's ranks hand theirs (``examples/eikonal_insitu.py``). Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONTOUR = """
pipelines:
  pl: {c: {type: contour, params: {field: T, iso_values: [0.35]}}}
scenes:
  s:
    plots: {p: {type: pseudocolor, pipeline: pl}}
    renders: {r: {image_width: 480, image_height: 360, image_prefix: frame_%04d}}
"""
CONFIGS = {
    "contour + pseudocolor": CONTOUR,
    "demo (contour, pseudocolor, volume, BP5 extract)": os.path.join(ROOT, "examples", "eikonal_insitu.yaml"),
}

# The child: one fresh process, one pipeline, two steps; prints its timings as JSON.
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import adaptors
t1 = time.perf_counter()
n = {n}
x = np.linspace(0.0, 1.0, n + 2)  # one ghost layer on each side
X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
T = np.sqrt(X ** 2 + Y ** 2 + Z ** 2) / np.sqrt(3.0)
speed = 0.5 + 2.0 * Z
mesh = adaptors.uniform({{"T": T, "speed": speed}}, origin=(-x[1],) * 3, spacing=(x[1] - x[0],) * 3, ghost=1)
assert adaptors.__file__.startswith({root!r}), adaptors.__file__  # the tree, or the read-only copy
with adaptors.Adaptor({config!r}) as a:
    t2 = time.perf_counter()
    ok0 = a.execute(0, 0.0, mesh)
    t3 = time.perf_counter()
    ok1 = a.execute(1, 0.1, mesh)
    t4 = time.perf_counter()
    errors = a.results()["errors"]
print(json.dumps({{"import": t1 - t0, "initialize": t2 - t1, "first": t3 - t2, "second": t4 - t3,
                  "ok": bool(ok0 and ok1), "errors": errors}}))
"""


def _env(cache: str, root: str) -> dict:
    return {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def child(config: str, cache: str, work: str, n: int, root: str = ROOT) -> dict:
    code = CHILD.format(config=config, n=n, root=root)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(cache, root), cwd=work,
                       timeout=1800)
    if p.returncode:
        raise RuntimeError(f"child failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"a step failed: {out['errors']}")
    return out


def warmup(config: str | None, cache: str, work: str, root: str = ROOT) -> float:
    t0 = time.perf_counter()
    args = [sys.executable, "-m", "insitu", "warmup"] + ([config] if config else [])
    p = subprocess.run(args, capture_output=True, text=True, env=_env(cache, root), cwd=work, timeout=3600)
    if p.returncode:
        raise RuntimeError(f"insitu warmup failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0


def install_read_only(dest: str) -> str:
    """The four packages copied under `dest` and byte-compiled (as pip installs them), then made
    read-only; returns the directory to put on ``sys.path``. Entry points come from this
    environment's installed metadata (they name modules, found first in the copy)."""
    import compileall

    site = os.path.join(dest, "site-packages")
    for pkg in ("insitu", "adaptors", "render", "solvers"):
        shutil.copytree(os.path.join(ROOT, pkg), os.path.join(site, pkg),
                        ignore=shutil.ignore_patterns("__pycache__"))
    if not compileall.compile_dir(site, quiet=1):
        raise RuntimeError(f"byte-compiling {site} failed")
    read_only(site)
    return site


def read_only(path: str) -> None:
    for d, dirs, files in os.walk(path):
        for f in files:
            os.chmod(os.path.join(d, f), stat.S_IRUSR | stat.S_IRGRP)
        os.chmod(d, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)


def writable(path: str) -> None:  # so the temporary directory can go
    for d, dirs, files in os.walk(path):
        os.chmod(d, stat.S_IRWXU)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="block size (nodes per axis, ghosts aside)")
    ap.add_argument("--all", action="store_true", help="also measure after `insitu warmup` of every kernel")
    args = ap.parse_args(argv)
    print(f"first execute in a fresh process, {args.n}^3 block; Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start\n")
    print("| pipeline | cache | warmup (s) | import (s) | initialize (s) | first execute (s) | second execute (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, text in CONFIGS.items():
        with tempfile.TemporaryDirectory(prefix="bench-first-") as tmp:
            config = text if os.path.exists(text) else os.path.join(tmp, "config.yaml")
            if config != text:
                with open(config, "w") as f:
                    f.write(text)
            cases = [("cold", None, False, False), ("after `insitu warmup CONFIG`", config, False, False),
                     ("same, cache read-only", config, True, False),
                     ("installed read-only, after `insitu warmup CONFIG`", config, False, True)]
            if args.all:
                cases.append(("after `insitu warmup` (all)", "", False, False))
            for label, warm, ro, installed in cases:
                cache = os.path.join(tmp, f"cache-{len(os.listdir(tmp))}")
                work = os.path.join(tmp, f"work-{len(os.listdir(tmp))}")
                os.makedirs(cache)
                os.makedirs(work)
                root = install_read_only(os.path.join(tmp, "install")) if installed else ROOT
                try:
                    w = warmup(warm or None, cache, work, root) if warm is not None else None
                    if ro:
                        read_only(cache)
                    r = child(config, cache, work, args.n, root)
                finally:
                    writable(cache)
                    if installed:
                        writable(os.path.join(tmp, "install"))
                ws = f"{w:.1f}" if w is not None else "-"
                print(f"| {name} | {label} | {ws} | {r['import']:.2f} | {r['initialize']:.2f} | {r['first']:.2f} "
                      f"| {r['second']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
