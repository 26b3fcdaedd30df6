"""What the readable ADIOS2 layouts cost: seconds per step of the ``adios2_mesh`` stream
(blocks of global arrays, schemas) and of the frame stream (rgba rows bottom first,
luminance, schemas), each beside a plain ADIOS2 BP5 write of the same arrays as they come
(the old layouts' cost). One process, BP5 into a temporary folder; prints a markdown table.

    python tests/gpu/bench_adios2_out.py --cpu        # NumPy arrays
    python tests/gpu/bench_adios2_out.py --gpu        # CuPy arrays (the device->host copies counted in)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from adaptors.mesh import parse, uniform
from adaptors.meshstream import MeshStream
from insitu import arrays
from insitu.stream import FrameWriter


def best(fn, reps: int) -> float:
    fn(0)  # warm-up: variables defined, buffers taken
    out = []
    for i in range(1, reps + 1):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return min(out)


def plain(path: str):
    """A plain BP5 stream: each array written whole, as it comes."""
    import adios2

    ad = adios2.Adios()
    io = ad.declare_io(path)
    io.set_engine("BP5")
    s = adios2.Stream(io, path, "w")

    def put(variables):
        s.begin_step()
        for k, a in variables:
            a = np.ascontiguousarray(arrays.to_host(a))
            s.write(k, a, list(a.shape), [0] * a.ndim, list(a.shape))
        s.end_step()
    return s, put


def mesh_row(n: int, blocks: int, xp, reps: int, tmp: str) -> tuple:
    """n^3 nodes split into `blocks` slabs along x (one ghost layer each inner side)."""
    rng = np.random.default_rng(0)
    g = rng.random((n, n, n))
    cuts = np.linspace(0, n - 1, blocks + 1).astype(int)
    doms = []
    for b in range(blocks):
        lo, hi = max(cuts[b] - 1, 0), min(cuts[b + 1] + 1, n - 1)
        ghost = ((cuts[b] - lo, hi - cuts[b + 1]), (0, 0), (0, 0))
        doms.append(uniform({"T": xp.asarray(g[lo:hi + 1])}, origin=(lo, 0, 0), ghost=ghost, domain_id=b))
    mesh = parse(doms)
    ms = MeshStream(os.path.join(tmp, f"mesh{n}.bp"), "BP5")
    t_ours = best(lambda i: ms.write(mesh, ["T"], step=i, time=float(i)), reps)
    ms.close()
    s, put = plain(os.path.join(tmp, f"plain{n}.bp"))
    t_plain = best(lambda i: put([(f"d{d.domain_id}/T", d.fields["T"].values) for d in mesh]), reps)
    s.close()
    return f"mesh {n}^3 nodes, {blocks} blocks", t_ours, t_plain


def frame_row(w: int, h: int, xp, reps: int, tmp: str) -> tuple:
    img = xp.asarray(np.random.default_rng(1).integers(0, 256, (h, w, 4), dtype=np.uint8))
    fw = FrameWriter(os.path.join(tmp, f"frames{w}.bp"), "BP5")
    t_ours = best(lambda i: fw.write(img, step=i, time=float(i)), reps)
    fw.close()
    s, put = plain(os.path.join(tmp, f"pframes{w}.bp"))
    t_plain = best(lambda i: put([("image", img), ("step", np.array([i])), ("time", np.array([float(i)]))]), reps)
    s.close()
    return f"frame {w}x{h}", t_ours, t_plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="CuPy arrays, larger sizes")
    ap.add_argument("--cpu", action="store_true", help="NumPy arrays (default)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.gpu:
        import cupy as xp
        meshes, frames = [(128, 4), (256, 8)], [(1920, 1080), (3840, 2160)]
    else:
        xp = np
        meshes, frames = [(64, 2), (128, 4)], [(640, 480), (1920, 1080)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += [mesh_row(n, b, xp, args.reps, tmp) for n, b in meshes]
        rows += [frame_row(w, h, xp, args.reps, tmp) for w, h in frames]
    print(f"| case ({'CuPy' if args.gpu else 'NumPy'}) | readable layout (s/step) | plain BP5 write (s/step) | ratio |")
    print("|---|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a:.4f} | {b:.4f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
