"""The adios2_mesh stream with CuPy fields: each block of each field is sliced and reordered
on the device and crosses once (counted: the host-only ADIOS2 needs it); the file equals
the one written from the same fields on the host. (CPU and MPI: tests/test_adios2_readable.py.)"""

import os
import sys

import numpy as np
import pytest

from adaptors.mesh import parse
from adaptors.meshstream import MeshStream
from insitu import arrays

cp = pytest.importorskip("cupy", reason="needs CuPy")
adios2 = pytest.importorskip("adios2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi"))
from adios2_blocks import blocks, domain  # noqa: E402 - the decomposed grid the MPI test writes


def on_device(d: dict) -> dict:
    """Blueprint domain `d` with its field values on the device."""
    out = dict(d)
    out["fields"] = {k: {**f, "values": cp.asarray(f["values"])} for k, f in d["fields"].items()}
    return out


def write(path: str, device: bool) -> list:
    stream = MeshStream(path, "BP5")
    counts = []
    for step in range(2):
        doms = [domain(b, step) for b in range(len(blocks()))]
        mesh = parse([on_device(d) for d in doms] if device else doms)
        cp.cuda.Device().synchronize()
        with arrays.count_transfers() as c:
            stream.write(mesh, ["T", "E"], step=step, time=0.25 * step)
        counts.append((c.d2h_calls, c.h2d_calls))
    stream.close()
    return counts


def test_device_fields_cross_once_per_block_and_equal_the_host_path(tmp_path):
    host, dev = str(tmp_path / "host.bp"), str(tmp_path / "dev.bp")
    assert write(host, False) == [(0, 0), (0, 0)]
    assert write(dev, True) == [(4 * 2, 0), (4 * 2, 0)]  # 4 blocks x 2 fields, nothing uploaded
    with adios2.FileReader(host) as a, adios2.FileReader(dev) as b:
        for step in range(2):
            for name in ("T", "E"):
                x = a.read(name, step_selection=[step, 1])
                y = b.read(name, step_selection=[step, 1])
                assert x.dtype == y.dtype
                np.testing.assert_array_equal(x, y)
