"""The Catalyst implementation's Python side with CUDA memory: a Conduit leaf whose pointer is
device memory becomes a CuPy view of that memory (mcarray components strided, no copy, no
host transfer), and the adaptor's Blueprint parser keeps it on the device.

The C module (libcatalyst-insitu) hands adaptors.catalyst.array_view the leaf's address,
dtype, count and stride; here the addresses come from CuPy arrays directly (tests/test_catalyst.py
runs the whole C path on host memory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import insitu
from insitu.launch import mpiexec


def test_a_device_leaf_becomes_a_cupy_view_of_the_same_memory():
    import cupy as cp

    from adaptors.catalyst import array_view

    vel = cp.arange(3 * 64, dtype=cp.float64).reshape(64, 3)  # interleaved x, y, z
    with insitu.arrays.count_transfers() as moved:
        views = [array_view(f"velocity/values/{c}", vel.data.ptr + 8 * i, "float64", 64, 24, 8)
                 for i, c in enumerate("xyz")]
    assert moved.calls == 0
    for i, v in enumerate(views):
        assert isinstance(v, cp.ndarray) and v.data.ptr == vel.data.ptr + 8 * i and v.strides == (24,)
        assert v.device.id == vel.device.id
        cp.testing.assert_array_equal(v, vel[:, i])


def test_device_mcarray_components_reach_the_parser_as_device_views():
    import cupy as cp

    from adaptors.catalyst import array_view, mesh_from_channels
    from adaptors.mesh import parse

    n = 4
    vel = cp.random.default_rng(0).random((n * n * n, 3))
    comps = {c: array_view(f"v/{c}", vel.data.ptr + 8 * i, "float64", n ** 3, 24, 8) for i, c in enumerate("xyz")}
    dom = {"coordsets": {"coords": {"type": "uniform", "dims": {"i": n, "j": n, "k": n}}},
           "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
           "fields": {"velocity": {"association": "vertex", "topology": "mesh", "values": comps}}}
    with insitu.arrays.count_transfers() as moved:
        (d,) = parse(mesh_from_channels({"grid": {"type": "mesh", "data": dom}}))
    assert moved.calls == 0
    y = d.fields["velocity/y"].values
    assert isinstance(y, cp.ndarray) and y.shape == (n, n, n) and y.data.ptr == vel.data.ptr + 8
    want = cp.asnumpy(vel[:, 1]).reshape(n, n, n).transpose()  # Blueprint order: i fastest
    np.testing.assert_array_equal(cp.asnumpy(y), want)


# --------------------------------------------------------------------------- the C path with device memory

# A C program that knows only catalyst.h (examples/catalyst_c/grid.c --device 1) hands Catalyst
# pointers to GPU memory; its frames must be those of adaptors.execute given CuPy arrays of the
# same values, and insitu must not copy the fields to the host on the way.

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import test_catalyst as tc  # noqa: E402

built = tc.built  # the module's fixture: Catalyst, libcatalyst-insitu and the example programs, built


def _device_config(path, out: str) -> str:
    cfg = {"pipelines": {"surface": {"iso": {"type": "contour", "params": {"field": "T", "iso_values": [0.5]}}}},
           "scenes": {"blobs": {"plots": {"s": {"type": "pseudocolor", "pipeline": "surface", "field": "velocity/y"}},
                                "renders": {"r1": {"image_width": 64, "image_height": 48,
                                                   "image_prefix": f"{out}/blobs_%04d",
                                                   "camera": {"azimuth": 30, "elevation": 20}}}},
                      "pressure": {"plots": {"p": {"type": "volume", "field": "pressure"}},
                                   "renders": {"r1": {"image_width": 48, "image_height": 40,
                                                      "image_prefix": f"{out}/pressure_%04d"}}}}}
    path.write_text(json.dumps(cfg))
    return str(path)


def _device_reference_main(config: str, n: int, steps: int) -> None:
    """adaptors.execute on the same meshes with every field a CuPy array (this file under mpiexec)."""
    import cupy as cp
    from mpi4py import MPI

    import adaptors

    comm = MPI.COMM_WORLD
    adaptors.initialize(config, comm=comm)
    for step in range(steps):
        mesh = tc.reference_mesh(n, step, comm.rank, comm.size)
        for f in mesh["fields"].values():
            f["values"] = cp.asarray(f["values"])
        assert adaptors.execute(step, 0.1 * step, mesh), adaptors.results()["errors"]
    adaptors.finalize()


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_catalyst_program_with_device_pointers_draws_what_execute_draws_from_cupy(built, tmp_path, ranks):
    run_dir, ref_dir = tmp_path / "catalyst", tmp_path / "reference"
    run_dir.mkdir()
    ref_dir.mkdir()
    p = tc._launch(ranks, [built.grid, _device_config(run_dir / "insitu.json", "out"), "--n", tc.N,
                           "--steps", tc.STEPS, "--device", 1], run_dir, tc._env(built))
    calls = ("initialize", "finalize", *range(tc.STEPS))
    assert tc._statuses(p.stdout) == {(r, c): tc.OK for r in range(ranks) for c in calls}, p.stdout
    res = tc._block(p.stdout, "results")["insitu"]
    assert res["nerrors"] == 0, res
    # rank 0's last step: nothing went to the device, and what came back is no more than its frames
    # (64x48 and 48x40 RGBA) and the few counts marching cubes reads
    moved = res["transfers"]
    assert moved["h2d_calls"] == 0 and moved["h2d_bytes"] == 0, moved
    assert 0 < moved["d2h_bytes"] <= 4 * (64 * 48 + 48 * 40) + 4096, moved

    ref = subprocess.run([*mpiexec(), "-n", str(ranks), sys.executable, os.path.abspath(__file__), "reference",
                          _device_config(ref_dir / "insitu.json", "out"), str(tc.N), str(tc.STEPS)], cwd=ref_dir,
                         env=tc.capi_build.env(NUMBA_NUM_THREADS="1", PYTHONPATH=tc.ROOT), capture_output=True,
                         text=True, timeout=240)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    got, want = tc._outputs(run_dir / "out"), tc._outputs(ref_dir / "out")
    names = {f"{kind}_{s:04d}.png" for kind in ("blobs", "pressure") for s in range(tc.STEPS)}
    assert set(got) == set(want) == names
    for name in sorted(names):
        assert got[name] == want[name], name


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "reference":
    _device_reference_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
