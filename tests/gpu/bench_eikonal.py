"""Benchmark: eikonal solver time to solution (CPU, vs scikit-fmm) and per-iteration GPU cost.

    python tests/gpu/bench_eikonal.py --cpu 128 256       # here: Numba vs scikit-fmm
    python tests/gpu/bench_eikonal.py --gpu 256 512 1024 1344
    python tests/gpu/bench_eikonal.py --tune 1344   # launch shapes of the sweep, as in bench_insitu

GPU: one sweep of the block-Jacobi update per iteration on one block of n^3 float64
(T, 1/speed and the output buffer at 8 bytes, the seed mask at 1: 25 bytes per node
must move at least once), timed with CUDA events after warm-up, median; set against a
device-to-device copy measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def cpu(sizes):
    import numba
    import skfmm

    from solvers.eikonal import solve
    from solvers.eikonal.speed import random_smooth

    rows = []
    for n in sizes:
        h = 1.0 / (n - 1)
        x = np.arange(n) * h
        sp = np.broadcast_to(random_smooth(seed=0)(x[:, None, None], x[None, :, None], x[None, None, :]),
                             (n, n, n)).copy()
        seeds = np.zeros((n, n, n), bool)
        seeds[n // 2, n // 2, n // 2] = True
        solve(sp[:8, :8, :8], seeds[:8, :8, :8] | (np.indices((8, 8, 8)).sum(0) == 0))  # compile
        t = time.perf_counter()
        T = solve(sp, seeds, (h, h, h))
        ours = time.perf_counter() - t
        t = time.perf_counter()
        full = solve(sp, seeds, (h, h, h), skip_idle=False)
        ours_full = time.perf_counter() - t
        assert np.array_equal(full, T)  # the active list changes the work, not the answer
        phi = np.where(seeds, 0.0, 1.0)
        t = time.perf_counter()
        R = skfmm.travel_time(phi, sp, dx=h, order=1)
        ref = time.perf_counter() - t
        rows.append((n, ours, ours_full, ref, float(np.max(np.abs(T - R) / np.maximum(R, 1e-300)))))
        print(rows[-1], flush=True)
    out = ["### Eikonal, CPU: time to solution vs scikit-fmm (random smooth speed, centre seed)", "",
           f"Device: this project's CPU machine ({os.cpu_count()} cores, Numba {numba.__version__} with "
           f"{numba.config.NUMBA_NUM_THREADS} threads); date {datetime.date.today()}; commit {commit()}; "
           f"command `python tests/gpu/bench_eikonal.py --cpu {' '.join(map(str, sizes))}`.", "",
           "| grid | insitu (block Jacobi, Numba, idle tiles skipped), s | the same, every tile swept, s | "
           "scikit-fmm (FMM, order 1), s | ratio (skipped / scikit-fmm) | max rel. difference |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {a:.2f} | {f:.2f} | {b:.2f} | {a / b:.1f}x | {d:.1e} |" for n, a, f, b, d in rows]
    return "\n".join(out) + "\n"


def gpu(sizes, reps=20):
    import cupy as cp

    from solvers.eikonal import _gpu

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for n in sizes:
        p = n + 2
        T = cp.full((p, p, p), cp.inf)
        T[p // 2, p // 2, p // 2] = 0
        out = T.copy()
        w = cp.ones((p, p, p))
        frozen = T == 0
        ch = cp.zeros(1, cp.uint64)
        ev = [cp.cuda.Event(), cp.cuda.Event()]
        ts = []
        for i in range(reps + 3):
            ev[0].record()
            _gpu.sweep(T, out, w, frozen, 1.0, 1.0, 1.0, ch)
            ev[1].record()
            ev[1].synchronize()
            T, out = out, T
            if i >= 3:
                ts.append(cp.cuda.get_elapsed_time(*ev) / 1e3)
        t = float(np.median(ts))
        a = cp.empty(p ** 3 * 8 // 8, cp.float64)
        b = cp.empty_like(a)
        cts = []
        for i in range(reps + 3):
            ev[0].record()
            b[...] = a
            ev[1].record()
            ev[1].synchronize()
            if i >= 3:
                cts.append(cp.cuda.get_elapsed_time(*ev) / 1e3)
        copy_bw = 2 * a.nbytes / float(np.median(cts))  # read + write
        nbytes = 25 * p ** 3
        rows.append((n, t, nbytes / t, copy_bw))
        print(rows[-1], flush=True)
        del T, out, w, frozen, a, b
        cp.get_default_memory_pool().free_all_blocks()
    out = ["### Eikonal, GPU: one Jacobi sweep (iteration) on one block", "",
           f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; "
           f"command `python tests/gpu/bench_eikonal.py --gpu {' '.join(map(str, sizes))}`; "
           f"median of {reps} sweeps (CUDA events) after warm-up.", "",
           "| grid | ms / iteration | effective GB/s (25 B/node) | device copy GB/s (read+write) | fraction of copy |",
           "| --- | ---: | ---: | ---: | ---: |"]
    out += [f"| {n}^3 | {t * 1e3:.2f} | {bw / 1e9:.0f} | {c / 1e9:.0f} | {100 * bw / c:.0f}% |" for n, t, bw, c in rows]
    return "\n".join(out) + "\n"


def tune(n: int, reps: int = 10) -> str:
    """One sweep on an n^3 block in the state examples/bench_insitu.py times (a front
    n/8 sweeps out from a point, float32 slowness, with and without the fused float32
    display copy), for several launch shapes."""
    import cupy as cp

    from solvers.eikonal import _gpu

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    p = n + 2
    T = cp.full((p, p, p), cp.inf)
    seed = (int(0.3 * p), int(0.4 * p), int(0.5 * p))
    T[seed] = 0
    out = T.copy()
    w = cp.ones((p, p, p), cp.float32)
    frozen = T == 0
    view = cp.empty((p, p, p), cp.float32)
    ch = cp.zeros(1, cp.uint64)
    h = 1.0 / (n - 1)
    for _ in range(n // 8):
        _gpu.sweep(T, out, w, frozen, h, h, h, ch)
        T, out = out, T
    ev = [cp.cuda.Event(), cp.cuda.Event()]

    def timed(**kw) -> float:
        nonlocal T, out
        ts = []
        for i in range(reps + 2):
            ev[0].record()
            _gpu.sweep(T, out, w, frozen, h, h, h, ch, **kw)
            ev[1].record()
            ev[1].synchronize()
            T, out = out, T
            if i >= 2:
                ts.append(cp.cuda.get_elapsed_time(*ev))
        return float(np.median(ts))

    rows = []
    # Wider tiles (128x1, 256x1, 16x16) and chunks of 8 or 128 were 10-70% slower on an H200.
    shapes = [(t, c, 1) for t in ((32, 8), (32, 4), (64, 4), (32, 2), (64, 2)) for c in (16, 32, 64)]
    shapes += [(t, c, u) for t in ((32, 8), (32, 4)) for c in (32, 64) for u in (2, 4)]
    for tile, chunk, unroll in shapes:
        kw = dict(tile=tile, chunk=chunk, unroll=unroll)
        rows.append((tile, chunk, unroll, timed(**kw), timed(view=view, clip=10.0, **kw)))
        print(rows[-1], flush=True)
    best = min(rows, key=lambda r: r[4])
    # Skipping idle tiles (the solver's default): only the tiles around the front are visited.
    tiles = _gpu.ActiveTiles(T.shape)
    idle = (timed(tiles=tiles), timed(tiles=tiles, view=view, clip=10.0), tiles.fraction())
    print("idle tiles skipped", idle, flush=True)
    out_ = [f"### Eikonal, GPU: launch shapes of the sweep at {n}^3 (float64 T, float32 slowness)", "",
            f"Device: {dev}; date {datetime.date.today()}; commit {commit()}; command `python "
            f"tests/gpu/bench_eikonal.py --tune {n}`; median of {reps} sweeps (CUDA events) on a front {n // 8} "
            f"sweeps out from a point; default tile {_gpu.TILE}, chunk {_gpu.CHUNK}, unroll {_gpu.UNROLL}; best "
            f"with the display copy: tile {best[0]}, chunk {best[1]}, unroll {best[2]}.", "",
            "| tile (k, j) | chunk | unroll | ms / sweep | ms / sweep with the float32 display copy |",
            "| --- | ---: | ---: | ---: | ---: |"]
    out_ += [f"| {t[0]}x{t[1]} | {c} | {u} | {a:.2f} | {b:.2f} |" for t, c, u, a, b in rows]
    out_ += [f"| {_gpu.TILE[0]}x{_gpu.TILE[1]}, idle tiles skipped ({idle[2]:.1%} of tiles visited) | {_gpu.CHUNK} | "
             f"{_gpu.UNROLL} | {idle[0]:.2f} | {idle[1]:.2f} |"]
    return "\n".join(out_) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, nargs="*", default=None)
    ap.add_argument("--gpu", type=int, nargs="*", default=None)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    text = ""
    if args.cpu:
        text += cpu(args.cpu)
    if args.gpu:
        text += gpu(args.gpu)
    if args.tune:
        text += tune(args.tune)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
