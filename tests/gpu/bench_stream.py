"""Benchmark: frames per second over ADIOS2 SST on loopback, next to writing PNG files.

    python tests/gpu/bench_stream.py [--sizes 1024 2048] [--frames 200] [--md FILE]

A writer process streams RGBA8 frames (lossless SST: every frame is delivered, so the
rate is what the link sustains) to a reader process in the same node; the reader's
rate from its first to its last frame is reported, with MB/s. Beside it: the same
frames written as PNG files by Pillow (what a frame-per-file workflow costs), and SST
with the in-situ default (discard, no reader waiting). Runs on CPU machines; the
device line names the host. Target: 200 frames/s at 1024^2.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import ROOT, commit, emit

WRITER = """
import sys, time
import numpy as np
from insitu.stream import FrameWriter
name, n, size, lossless = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
imgs = [np.random.default_rng(i).integers(0, 256, (size, size, 4), dtype=np.uint8) for i in range(4)]
w = FrameWriter(name, "SST", lossless=lossless)
t0 = time.perf_counter()
for s in range(n):
    w.write(imgs[s % 4], step=s, time=float(s))
dt = time.perf_counter() - t0
w.close()
print("writer", dt, flush=True)
"""

READER = """
import sys, time
from insitu.stream import FrameReader
r = FrameReader(sys.argv[1], "SST", timeout=60)
n, t0, t1 = 0, None, None
for f in r:
    n += 1
    t1 = time.perf_counter()
    if t0 is None:
        t0 = t1
print("reader", n, (t1 - t0) if n > 1 else 0.0, flush=True)
"""


def run(code, *args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=cwd)


def sst(size: int, frames: int, tmp: str, lossless: bool) -> tuple[float, int]:
    """(frames/s at the reader, frames received) for lossless; (frames/s at the writer, 0) without a reader."""
    name = os.path.join(tmp, f"bench_{size}_{int(lossless)}")
    w = run(WRITER, name, frames, size, int(lossless), cwd=tmp)
    if not lossless:
        out, _ = w.communicate(timeout=600)
        return frames / float(out.split()[1]), 0
    r = run(READER, name, cwd=tmp)
    rout, _ = r.communicate(timeout=600)
    w.communicate(timeout=600)
    _, n, dt = rout.split()
    n, dt = int(n), float(dt)
    return (n - 1) / dt, n


def png(size: int, frames: int, tmp: str, smooth: bool) -> float:
    from PIL import Image

    if smooth:  # a rendered frame is mostly smooth shading over a flat background
        y, x = np.mgrid[0:size, 0:size] / size
        img = np.stack([x * 255, y * 255, (x * y) * 255, np.full_like(x, 255)], -1).astype(np.uint8)
    else:
        img = np.random.default_rng(0).integers(0, 256, (size, size, 4), dtype=np.uint8)
    t0 = time.perf_counter()
    for s in range(frames):
        Image.fromarray(img, "RGBA").save(os.path.join(tmp, f"f_{s}.png"))
    return frames / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--png-frames", type=int, default=10)
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        for size in args.sizes:
            mb = size * size * 4 / 1e6
            fps, n = sst(size, args.frames, tmp, True)
            assert n == args.frames, f"lossless SST delivered {n} of {args.frames} frames"
            rows.append((size, "SST lossless, writer -> reader process (every frame delivered)", fps, fps * mb))
            fps, _ = sst(size, args.frames, tmp, False)
            rows.append((size, "SST in-situ default (discard), no reader: the writer's cost", fps, fps * mb))
            fps = png(size, args.png_frames, tmp, smooth=True)
            rows.append((size, "PNG files (Pillow), smooth gradient frames", fps, fps * mb))
            fps = png(size, args.png_frames, tmp, smooth=False)
            rows.append((size, "PNG files (Pillow), the random frames above (PNG's worst case)", fps, fps * mb))
    cpu = platform.processor() or platform.machine()
    head = (f"### Frames over ADIOS2 SST (loopback) vs PNG files\n\nHost: {cpu}, {os.cpu_count()} cores; date "
            f"{datetime.date.today()}; commit {commit()}; command `python tests/gpu/bench_stream.py --sizes "
            f"{' '.join(map(str, args.sizes))} --frames {args.frames}`; RGBA8 frames.\n\n"
            "| size | path | frames/s | MB/s |\n| --- | --- | ---: | ---: |\n")
    body = "".join(f"| {s}^2 | {what} | {fps:.0f} | {mbs:.0f} |\n" for s, what, fps, mbs in rows)
    emit(head + body, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
