"""Benchmark: the relay extract (adaptors.relay.write_mesh) writing Blueprint files.

    python tests/gpu/bench_relay.py --cpu 64 128    # n: 8 domains of n^3 nodes
    python tests/gpu/bench_relay.py --gpu 128 256   # the same fields on the device

8 uniform domains of n^3 nodes, each with a float64 vertex field, a float32 element field
and a 3-component float64 vertex mcarray (ghosts: one layer). CPU: best of 3 wall times of
write_mesh (hdf5, yaml, json; one process) against VTK writing the same arrays, one
domain a file, with vtkXMLImageDataWriter (raw binary, appended, no compression) and a
vtkXMLMultiBlockDataSet index, one thread; MB/s counts the field bytes. GPU: write_mesh
(hdf5) from CuPy fields, median of 3, with its device->host copies (one per array).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import commit, emit, host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from adaptors import mesh  # noqa: E402
from adaptors.relay import write_mesh  # noqa: E402

NDOM = 8


def inputs(n: int, xp=np):
    rng = np.random.default_rng(1)
    doms, raw = [], []
    for i in range(NDOM):
        t = rng.random((n, n, n))
        p = rng.random((n - 1,) * 3).astype(np.float32)
        vel = {c: rng.random((n, n, n)) for c in "xyz"}
        d = mesh.uniform({"T": xp.asarray(t), "P": xp.asarray(p)}, element=["P"], ghost=1,
                         origin=(i * (n - 1), 0, 0), domain_id=i)
        d["fields"]["vel"] = {"association": "vertex", "topology": "mesh",
                              "values": {c: xp.asarray(v) for c, v in vel.items()}}
        doms.append(d)
        raw.append((t, p, vel))
    return mesh.parse(doms), raw


def field_bytes(raw) -> int:
    return sum(t.nbytes + p.nbytes + sum(v.nbytes for v in vel.values()) for t, p, vel in raw)


def best(fn, reps: int = 3) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def vtk_write(folder: str, domains, raw) -> None:
    import vtk
    from vtk.util.numpy_support import numpy_to_vtk

    mb = vtk.vtkMultiBlockDataSet()
    for i, (d, (t, p, vel)) in enumerate(zip(domains, raw)):
        img = vtk.vtkImageData()
        img.SetDimensions(*d.dims)
        img.SetOrigin(*d.origin)
        img.SetSpacing(*d.spacing)
        for name, a, pd in (("T", t, img.GetPointData()), ("P", p, img.GetCellData())):
            arr = numpy_to_vtk(a.ravel(order="F"), deep=0)
            arr.SetName(name)
            pd.AddArray(arr)
        v = numpy_to_vtk(np.stack([vel[c].ravel(order="F") for c in "xyz"], axis=1), deep=0)
        v.SetName("vel")
        img.GetPointData().AddArray(v)
        w = vtk.vtkXMLImageDataWriter()
        w.SetFileName(os.path.join(folder, f"domain_{i:06d}.vti"))
        w.SetInputData(img)
        w.SetDataModeToAppended()
        w.EncodeAppendedDataOff()
        w.SetCompressorTypeToNone()
        w.Write()
        mb.SetBlock(i, img)


def cpu(sizes, md) -> None:
    import vtk

    vtk.vtkMultiThreader.SetGlobalMaximumNumberOfThreads(1)
    rows = ["| domains | fields (MB) | insitu hdf5 (ms) | MB/s | insitu yaml (ms) | insitu json (ms) | "
            "VTK .vti (ms) | MB/s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sizes:
        domains, raw = inputs(n)
        mb = field_bytes(raw) / 1e6
        tmp = tempfile.mkdtemp(prefix="bench-relay-")
        try:
            ours = {p: best(lambda p=p: write_mesh(f"{tmp}/{p}/s", domains, protocol=p), 3 if p == "hdf5" else 1)
                    for p in ("hdf5", "yaml", "json")}
            os.makedirs(f"{tmp}/vtk")
            theirs = best(lambda: vtk_write(f"{tmp}/vtk", domains, raw))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append(f"| {NDOM} x {n}^3 | {mb:.0f} | {1e3 * ours['hdf5']:.0f} | {mb / ours['hdf5']:.0f} | "
                    f"{1e3 * ours['yaml']:.0f} | {1e3 * ours['json']:.0f} | {1e3 * theirs:.0f} | {mb / theirs:.0f} |")
    emit(f"CPU, {host()}, one process, commit {commit()} (yaml/json: one run; text formats)\n\n"
         + "\n".join(rows), md)


def gpu(sizes, md) -> None:
    import cupy

    from insitu import arrays

    rows = ["| domains | fields (MB) | insitu hdf5 from CuPy (ms) | device->host copies | MB/s |",
            "|---|---:|---:|---:|---:|"]
    for n in sizes:
        domains, raw = inputs(n, cupy)
        mb = field_bytes(raw) / 1e6
        tmp = tempfile.mkdtemp(prefix="bench-relay-")
        times = []
        try:
            for _ in range(3):
                cupy.cuda.Device().synchronize()
                with arrays.count_transfers() as c:
                    t0 = time.perf_counter()
                    write_mesh(f"{tmp}/s", domains)
                    times.append(time.perf_counter() - t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        t = statistics.median(times)
        rows.append(f"| {NDOM} x {n}^3 | {mb:.0f} | {1e3 * t:.0f} | {c.d2h_calls} | {mb / t:.0f} |")
    emit(f"GPU, {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, commit {commit()}\n\n"
         + "\n".join(rows), md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", type=int, nargs="*", default=None)
    ap.add_argument("--gpu", type=int, nargs="*", default=None)
    ap.add_argument("--md", default=None, help="append the tables to this Markdown file")
    a = ap.parse_args()
    if a.cpu is None and a.gpu is None:
        a.cpu = [32, 64]
    if a.cpu is not None:
        cpu(a.cpu or [32, 64], a.md)
    if a.gpu is not None:
        gpu(a.gpu or [128, 256], a.md)


if __name__ == "__main__":
    main()
