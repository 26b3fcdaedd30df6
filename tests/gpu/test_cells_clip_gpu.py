"""render.cells clip, isovolume and threshold on CuPy arrays: the same mesh as on NumPy (same
cells in the same order, same points), and nothing crosses to the host but the counted
scalar reads each function documents."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="needs CuPy")

from insitu import arrays  # noqa: E402
from render.cells import cell_mesh  # noqa: E402
from render.cells.clip import clip, clip_box, clip_plane, clip_sphere, isovolume  # noqa: E402
from render.cells.measure import volume  # noqa: E402
from render.cells.threshold import threshold  # noqa: E402

from test_cells_clip import MESHES, PLANE, quads, smooth, tris  # noqa: E402  (tests/ is on sys.path)

ALL = {**MESHES, "quads": quads, "tris": tris}


def to_device(m):
    return cell_mesh(cp.asarray(m.points), cp.asarray(m.connectivity), cp.asarray(m.types), cp.asarray(m.offsets))


def assert_same(cpu, gpu):
    """The same output mesh, fields and parents; points to rounding (FMA on the device)."""
    for name in ("connectivity", "offsets", "types"):
        np.testing.assert_array_equal(cp.asnumpy(getattr(gpu.mesh, name)), getattr(cpu.mesh, name), err_msg=name)
    np.testing.assert_array_equal(cp.asnumpy(gpu.cells), cpu.cells)
    np.testing.assert_allclose(cp.asnumpy(gpu.mesh.points), cpu.mesh.points, rtol=0, atol=1e-12)
    for k in cpu.point_fields:
        np.testing.assert_allclose(cp.asnumpy(gpu.point_fields[k]), cpu.point_fields[k], rtol=0, atol=1e-12)
    for k in cpu.cell_fields:
        np.testing.assert_array_equal(cp.asnumpy(gpu.cell_fields[k]), cpu.cell_fields[k])
    assert isinstance(gpu.mesh.points, cp.ndarray) and isinstance(gpu.cells, cp.ndarray)


@pytest.mark.parametrize("name", list(ALL))
def test_clip_on_device_equals_host(name):
    m = ALL[name]()
    s = smooth(m.points)
    pf, cf = {"s": s}, {"c": np.arange(m.n_cells, dtype=np.float64)}
    cpu = clip(m, s, 0.1, point_fields=pf, cell_fields=cf)
    d, ds = to_device(m), cp.asarray(s)
    dpf, dcf = {"s": ds}, {"c": cp.asarray(cf["c"])}
    clip(d, ds, 0.1)  # the first call uploads the tables
    with arrays.count_transfers() as c:
        gpu = clip(d, ds, 0.1, point_fields=dpf, cell_fields=dcf)
    dims_cut = 2 if name in ("quads", "tris") else 3
    assert c.calls == 0
    assert c.scalar_reads == 11 + 1 + 1  # one dimension cut: see clip's Notes
    assert_same(cpu, gpu)
    want = volume(cpu.mesh) if dims_cut == 3 else None
    if want is not None:
        assert volume(gpu.mesh) == pytest.approx(want, rel=1e-12)


def test_implicit_clips_isovolume_threshold_on_device():
    m = MESHES["mixed"]()
    d = to_device(m)
    s, cv = smooth(m.points), np.arange(m.n_cells) % 5.0
    ds, dcv = cp.asarray(s), cp.asarray(cv)
    clip(d, ds, 0.0)
    cases = [  # (filter, scalar reads it documents)
        (lambda mm, ss, cc: clip_plane(mm, *PLANE), 13),
        (lambda mm, ss, cc: clip_sphere(mm, (0.5, 0.5, 0.5), 0.4, inside=False), 13),
        (lambda mm, ss, cc: clip_box(mm, (0.2, 0.1, 0.3), (0.8, 0.9, 0.7)), None),  # six clips
        (lambda mm, ss, cc: isovolume(mm, ss, -0.2, 0.3), 26),  # two clips
        (lambda mm, ss, cc: threshold(mm, ss, -0.2, 0.3), 4),
        (lambda mm, ss, cc: threshold(mm, ss, -0.2, 0.3, all_points=False), 4),
        (lambda mm, ss, cc: threshold(mm, cc, 1, 3, association="element"), 4),
    ]
    for f, reads in cases:
        cpu = f(m, s, cv)
        with arrays.count_transfers() as c:
            gpu = f(d, ds, dcv)
        assert c.calls == 0
        if reads is None:  # six clips, 11 reads each, 2 more for those that cut
            assert 6 * 11 <= c.scalar_reads <= 6 * 13
        else:
            assert c.scalar_reads == reads
        assert_same(cpu, gpu)
