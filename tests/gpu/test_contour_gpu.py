"""Marching cubes on CuPy arrays (CUDA kernels): the same mesh as the Numba path, numbered
alike; no array transfers (only the counts come back as scalars)."""

import numpy as np
import pytest
from scipy.spatial import cKDTree

import insitu
from insitu import Domain
from render.contour import label_surfaces, marching_cubes, marching_cubes_blocks

from test_contour_topology import assert_manifold  # tests/ is on sys.path (tests/conftest.py)
from test_contour import crossed_edge_end

cp = pytest.importorskip("cupy", reason="needs CuPy")


def smooth_random(shape, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    return np.real(np.fft.ifftn(f * np.exp(-sum(kk ** 2 for kk in k) * 200)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gpu_mesh_equals_cpu_mesh(dtype):
    vol = smooth_random((70, 36, 38), 1).astype(dtype)  # 70 planes: several segments along axis 0
    field = np.cos(vol * 7)
    cpu = marching_cubes(vol, [0.0, 0.05], spacing=(0.1, 0.2, 0.3), values=field)
    dvol, dfield = cp.asarray(vol), cp.asarray(field)
    marching_cubes(dvol, 0.0)  # the first call uploads the case tables
    with insitu.no_host_transfers(allow_scalars=True) as counted:
        gpu = marching_cubes(dvol, [0.0, 0.05], spacing=(0.1, 0.2, 0.3), values=dfield)
    assert counted.scalar_reads <= 5  # non-finite flag, vertices per level, faces, values check
    assert all(isinstance(a, cp.ndarray) for a in gpu)
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape
    np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])  # same faces, same order
    for i in (0, 2, 3):
        np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)


def test_gpu_meshes_made_in_the_last_calls_room_are_the_cpu_meshes():
    """From the second call on a geometry pass 2 goes out before the counts are read, into
    room the last call's mesh sized: a surface that outgrows it (made again), one that
    fits, one far smaller (copied out of the room) are each the CPU's mesh, with the
    same reads."""
    from render.contour import _gpu

    vol = smooth_random((70, 36, 38), 4)
    field = np.sin(vol * 5)
    dvol, dfield = cp.asarray(vol), cp.asarray(field)
    s = float(vol.std())
    marching_cubes(cp.asarray(vol[:4, :4, :4]), 0.0)  # the first call in a process uploads the case tables
    # levels: a smaller surface, a larger one (outgrows the room), the same, a tiny one, large again
    for levels in ([0.8 * s, 0.9 * s], [0.0, 0.1 * s], [0.0, 0.1 * s], [2.9 * s, 3.0 * s], [0.0, 0.05 * s]):
        cpu = marching_cubes(vol, levels, values=field)
        with insitu.no_host_transfers(allow_scalars=True) as counted:
            gpu = marching_cubes(dvol, levels, values=dfield)
        assert counted.scalar_reads <= 5
        assert any(sc.room is not None for sc in _gpu.Scratch._kept.values())
        for c, g in zip(cpu, gpu):
            assert c.shape == g.shape
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        for i in (0, 2, 3):
            np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)
    dom = Domain.create(vol.shape, blocks=(2, 1, 1), ghost=2)
    cpu = marching_cubes_blocks(dom, {b.gid: dom.extract(vol, b.gid) for b in dom}, 0.0)
    for _ in range(2):  # the second time in the room (vertex keys included)
        gpu = marching_cubes_blocks(dom, {b.gid: cp.asarray(dom.extract(vol, b.gid)) for b in dom}, 0.0)
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)


def scattered_balls() -> np.ndarray:
    """Small balls scattered over several units of the GPU passes along every axis (chunks
    of 16 planes, units of 24 rows and 30 points); level 0.5 puts one ball's surface on a
    unit boundary, lower levels give larger balls."""
    shape = (100, 80, 130)
    g = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    rng = np.random.default_rng(7)
    vol = np.zeros(shape)
    centres = [(50, 23.5, 60), (15, 47.5, 29.5), (85, 70, 100)] + [tuple(rng.uniform(5, n - 5) for n in shape)
                                                                   for _ in range(5)]
    for c in centres:
        vol = np.maximum(vol, 1.0 / (1.0 + sum((x - ci) ** 2 for x, ci in zip(g, c)) / 9.0))
    return vol


@pytest.mark.parametrize("span", [(32, 8, 32), (4, 4, 8)])
def test_gpu_mesh_from_tile_ranges_is_the_cpu_mesh(span):
    """With the volume's tile ranges the passes visit only the units whose ranges straddle
    a level (and their neighbours) and walk only the planes where pass 1 saw both sides:
    on sparse surfaces the mesh is the CPU's."""
    from insitu.ranges import tile_ranges

    vol = scattered_balls()
    dvol = cp.asarray(vol)
    ranges = tile_ranges(dvol, span)
    for levels in (0.5, [0.2, 0.9], 0.04):
        cpu = marching_cubes(vol, levels)
        gpu = marching_cubes(dvol, levels, tile_ranges=ranges)
        full = marching_cubes(dvol, levels)
        assert len(cpu[1]) > 0
        for c, g_, f in zip(cpu, gpu, full):
            assert c.shape == g_.shape == f.shape
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        np.testing.assert_array_equal(cp.asnumpy(gpu[0]), cp.asnumpy(full[0]))
        for i in (0, 2):
            np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)


def test_gpu_tile_ranges_mesh_that_outgrows_the_last_room_is_the_cpu_mesh():
    """With tile ranges, calls on one geometry whose surface grows past the room the last
    call sized (pass 2 runs a second time, into new arrays), shrinks and grows again are
    each the CPU's mesh: the second walk takes the listed units from the start (it once
    found them all taken by the first and wrote nothing: garbage vertices, or an illegal
    address in the vertex kernel)."""
    from insitu.ranges import tile_ranges
    from render.contour import _gpu

    vol = scattered_balls()
    dvol = cp.asarray(vol)
    ranges = tile_ranges(dvol, (32, 8, 32))
    _gpu.Scratch._kept.clear()
    sizes = []
    for level in (0.5, 0.04, 0.5, 0.04):  # small; outgrows the room; fits; outgrows it again
        cpu = marching_cubes(vol, level)
        gpu = marching_cubes(dvol, level, tile_ranges=ranges)
        sizes.append(len(cpu[1]))
        for c, g_ in zip(cpu, gpu):
            assert c.shape == g_.shape
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        for i in (0, 2):
            np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)
    assert sizes[1] > 2 * sizes[0]  # the second call outgrew the first's room


def test_gpu_chunks_too_long_for_plane_spans_are_walked_whole():
    """A box of nearly 2^20 planes has chunks of 65536 planes, more than pass 1's 16-bit
    plane spans hold: the walk steps over every plane of them; with and without tile
    ranges the mesh is the CPU's."""
    from insitu.ranges import tile_ranges
    from render.contour._tables import chunk_planes

    n0 = 2**20 - 6
    assert chunk_planes(n0) > 0xFFFF
    i = np.arange(n0, dtype=np.float32)[:, None, None]
    j = np.arange(3, dtype=np.float32)[None, :, None]
    k = np.arange(34, dtype=np.float32)[None, None, :]
    vol = np.sin(i / 20000.0) + 0.3 * np.cos(k / 3.0) + 0.1 * j  # surfaces winding along k over many planes
    dvol = cp.asarray(vol)
    cpu = marching_cubes(vol, 0.5)
    assert len(cpu[1]) > 1000
    for gpu in (marching_cubes(dvol, 0.5), marching_cubes(dvol, 0.5, tile_ranges=tile_ranges(dvol, (64, 8, 32)))):
        assert gpu[1].shape == cpu[1].shape
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        for n in (0, 2):
            np.testing.assert_allclose(cp.asnumpy(gpu[n]), cpu[n], atol=1e-4)


def test_gpu_writes_into_caller_device_buffers():
    vol = cp.asarray(smooth_random((40, 40, 40), 3), cp.float32)
    v, f, n = marching_cubes(vol, 0.0)
    bufs = (cp.zeros((len(v) + 7, 3), cp.float32), cp.full((len(f) + 3, 3), -1, cp.int32),
            cp.zeros((len(v) + 7, 3), cp.float32))
    with insitu.no_host_transfers(allow_scalars=True):
        v2, f2, n2 = marching_cubes(vol, 0.0, out=bufs)
    assert v2.data.ptr == bufs[0].data.ptr and f2.data.ptr == bufs[1].data.ptr and n2.data.ptr == bufs[2].data.ptr
    cp.testing.assert_array_equal(f2, f)
    cp.testing.assert_array_equal(v2, v)
    assert bool((bufs[1][len(f):] == -1).all())  # nothing written past the mesh
    with pytest.raises(ValueError, match="out faces: need int32"):
        marching_cubes(vol, 0.0, out=(bufs[0], cp.zeros((3, 3), cp.int32), bufs[2]))


def test_gpu_blocks_merge_like_cpu():
    vol = smooth_random((30, 28, 26), 2)
    dom = Domain.create(vol.shape, blocks=(2, 2, 2), ghost=2)
    cpu = marching_cubes_blocks(dom, {b.gid: dom.extract(vol, b.gid) for b in dom}, 0.0)
    gpu = marching_cubes_blocks(dom, {b.gid: cp.asarray(dom.extract(vol, b.gid)) for b in dom}, 0.0)
    np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
    np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)
    np.testing.assert_allclose(cp.asnumpy(gpu[2]), cpu[2], atol=1e-5)


def test_gpu_labels_and_binary_volumes():
    lab = np.zeros((30, 30, 30), np.int32)
    lab[2:10, 3:12, 4:14] = 3
    lab[12:28, 10:29, 0:8] = 7
    cpu = label_surfaces(lab)
    gpu = label_surfaces(cp.asarray(lab))
    for c, g in zip(cpu, gpu):
        np.testing.assert_allclose(cp.asnumpy(g), c, atol=1e-6)
    binary = (lab > 0).astype(np.uint8)  # read as uint8 by the kernels, no conversion
    np.testing.assert_array_equal(cp.asnumpy(marching_cubes(cp.asarray(binary), 0.5)[1]),
                                  marching_cubes(binary, 0.5)[1])


def test_gpu_nan_is_reported_and_the_next_call_is_whole():
    """A call that stops at a NaN leaves the kept scratch counted; the next call on the
    same geometry (zeroed at the end of a call that finished, so here again first) still
    makes the CPU's mesh."""
    vol = smooth_random((10, 12, 14), 3).astype(np.float32)
    cpu = marching_cubes(vol, 0.0)
    dvol = cp.asarray(vol)
    marching_cubes(dvol, 0.0)
    bad = dvol.copy()
    bad[3, 4, 5] = cp.nan
    with pytest.raises(ValueError, match="volume: contains NaN or inf"):
        marching_cubes(bad, 0.0)
    for _ in range(2):
        gpu = marching_cubes(dvol, 0.0)
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)


@pytest.mark.parametrize("dtype", [cp.float32, cp.float64])
def test_gpu_non_finite_values_in_the_region_are_reported_outside_ignored(dtype):
    vol = cp.asarray(smooth_random((20, 22, 24), 8), dtype)
    vals = cp.ones_like(vol)
    host = cp.asnumpy(vol)[2:16, 2:16, 2:16]
    end = tuple(int(x) + 2 for x in crossed_edge_end(host, 0.0))  # a crossed edge inside the cells contoured
    vals[end] = cp.inf
    with pytest.raises(ValueError, match="values: contains NaN or inf where the surface samples it"):
        marching_cubes(vol, 0.0, values=vals, region=((2, 2, 2), (15, 15, 15)))
    vals[end] = 1.0
    vals[19, 21, 23] = cp.nan  # beyond the region and its ghost layer: never read
    v, f, n, c = marching_cubes(vol, 0.0, values=vals, region=((2, 2, 2), (15, 15, 15)))
    assert len(f) and bool((c == 1.0).all())


@pytest.mark.parametrize("level", [0.1, 0.25, 0.3])
def test_gpu_float32_samples_at_the_level_classify_like_cpu(level):
    # Samples equal to float32(level): above a level that float32 rounds up, not above one it
    # represents exactly. The kernels compare floats against a float threshold.
    rng = np.random.default_rng(7)
    vol = rng.choice(np.array([0.0, level, 0.5], np.float32), size=(33, 35, 37))
    cpu = marching_cubes(vol, level)
    gpu = marching_cubes(cp.asarray(vol), level)
    assert len(cpu[1]) > 0
    np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
    np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)


def oriented_triangles(faces):
    """Triangles as rows rotated to start at their least vertex (orientation kept), sorted."""
    r = np.argmin(faces, axis=1)[:, None]
    t = np.take_along_axis(faces, (r + np.arange(3)) % 3, axis=1)
    return t[np.lexsort(t.T[::-1])]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_noise_mesh_is_the_cpu_mesh_and_manifold(dtype):
    # White noise puts an ambiguous face in most cells: the manifold case table on both paths.
    vol = np.random.default_rng(48).standard_normal((48, 48, 48)).astype(dtype)
    cv, cf, _ = marching_cubes(vol, 0.0)
    gv, gf, _ = (cp.asnumpy(a) for a in marching_cubes(cp.asarray(vol), 0.0))
    assert gv.shape == cv.shape and gf.shape == cf.shape
    # The same triangles by vertex position: each GPU vertex named by the CPU vertex at its place.
    d, ix = cKDTree(cv).query(gv)
    assert d.max() < 1e-5 and len(np.unique(ix)) == len(cv)
    np.testing.assert_array_equal(oriented_triangles(ix[gf]), oriented_triangles(cf))
    assert_manifold(gv, gf, vol.shape, f"GPU mesh, {np.dtype(dtype)}")


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
@pytest.mark.parametrize("shape, region", [
    ((70, 20, 132), None),  # a second segment of one lane; its first point is the first's extra sample
    ((40, 27, 256), None),  # whole segments: the last without a next sample; a last warp of rows short
    ((48, 36, 136), ((2, 3, 4), (40, 30, 129))),  # a box from k = 4 (aligned), its last lane half in it
], ids=["132", "256", "region"])
def test_gpu_whole_volume_pass_with_wide_loads_is_the_cpu_mesh(dtype, shape, region):
    """4-byte samples in 16-byte aligned rows take pass 1 with 16-byte loads (mc_count4: tiles
    straddle its segments, spans merge over its columns); noise at levels equal to samples,
    one level and two (a field sampled), the mesh numbered as the CPU numbers it, NaN still
    reported."""
    from render.contour import _gpu

    rng = np.random.default_rng(11)
    vol = rng.integers(0, 4, shape).astype(dtype)  # every case and ambiguity; samples equal to the level
    vol[: shape[0] // 2] = np.where(rng.random((shape[0] // 2, *shape[1:])) < 0.97, 0, 3)  # sparse: planes skipped
    kinds = []
    kernel = _gpu._kernel

    def spy(kind, *a, **kw):
        kinds.append(kind)
        return kernel(kind, *a, **kw)

    kw = {} if region is None else {"region": region}
    try:
        _gpu._kernel = spy
        for level in (1.0, 2.0, 1.5):
            cpu = marching_cubes(vol, level, **kw)
            gpu = marching_cubes(cp.asarray(vol), level, **kw)
            assert len(cpu[1]) > 1000
            np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
            np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)
            # normals where the gradient has a direction (on integer samples it can cancel to
            # zero, up to rounding that differs between the backends' arithmetic)
            some = np.linalg.norm(cpu[2], axis=1) > 0.5
            np.testing.assert_allclose(cp.asnumpy(gpu[2])[some], cpu[2][some], atol=1e-5)
        # two levels, a field sampled
        field = np.cos(vol.astype(np.float64))
        cpu = marching_cubes(vol, [2.0, 1.0], values=field, **kw)
        gpu = marching_cubes(cp.asarray(vol), [2.0, 1.0], values=cp.asarray(field), **kw)
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        for i in (0, 3):
            np.testing.assert_allclose(cp.asnumpy(gpu[i]), cpu[i], atol=1e-5)
    finally:
        _gpu._kernel = kernel
    assert "count4" in kinds and "count" not in kinds
    # a step between two segments: the columns that straddle them are one side in each
    step = np.zeros((20, 10, 256), dtype)
    step[..., :128] = 3
    for k0 in (0, 120):  # the step alone, and beside a column's start
        step[5:15, 2:8, k0:k0 + 2] = 3 - step[5:15, 2:8, k0:k0 + 2]
        cpu, gpu = marching_cubes(step, 1.5), marching_cubes(cp.asarray(step), 1.5)
        np.testing.assert_array_equal(cp.asnumpy(gpu[1]), cpu[1])
        np.testing.assert_allclose(cp.asnumpy(gpu[0]), cpu[0], atol=1e-5)
    if dtype == np.float32:
        bad = cp.asarray(vol)
        bad[10, 10, 100] = cp.nan  # inside every box above
        with pytest.raises(ValueError, match="volume: contains NaN or inf"):
            marching_cubes(bad, 1.0, **kw)


def test_gpu_vertex_edges_outside_the_volume_give_nan_vertices():
    """A packed vertex edge outside the gradient box (the passes disagreeing: a bug) makes a
    NaN vertex and key -1, not a read out of bounds that would lose the CUDA context; the
    other edges' vertices are right (a linear field: positions and normals exact)."""
    from render.contour import _gpu

    shape = (4, 5, 6)
    vol = cp.asarray(np.fromfunction(lambda i, j, k: 30 * i + 6 * j + k, shape, dtype=np.float32))
    level = 40.5

    def pack(i, j, k, a):
        return (i << 42) | (j << 22) | (k << 2) | a

    edges = [pack(1, 1, 4, 2), pack(0, 2, 3, 0), pack(3, 0, 0, 0), pack(0, 0, 0, 3), pack(1, 4, 0, 1),
             pack(2, 1, 5, 2), pack(5, 1, 1, 1), -1, 2**63 - 1]
    good = {0: (1.0, 1.0, 4.5), 1: (0.85, 2.0, 3.0)}
    n = len(edges)
    verts, normals = cp.empty((n, 3), cp.float32), cp.empty((n, 3), cp.float32)
    keys = cp.empty(n, cp.int64)
    dims = np.asarray(shape, np.int64)
    _gpu.vertices(vol, (0, 0, 0, 3, 4, 5), level, cp.asarray(np.array(edges, np.int64)), cp.asarray([n], cp.int32),
                  1, 0, n, n, np.array([1.0, 1, 1, 0, 0, 0]), (0, 0, 0), None, keys, dims, 0, verts, normals, None)
    v, nrm, key = cp.asnumpy(verts), cp.asnumpy(normals), cp.asnumpy(keys)
    grad = np.array([30.0, 6.0, 1.0])
    for e in range(n):
        if e in good:
            np.testing.assert_allclose(v[e], good[e], atol=1e-6)
            np.testing.assert_allclose(nrm[e], -grad / np.linalg.norm(grad), atol=1e-6)
            i, j, k = (int(x) for x in np.floor(np.array(good[e])))
            a = 2 if e == 0 else 0
            assert key[e] == ((a * shape[0] + i) * shape[1] + j) * shape[2] + k
        else:
            assert np.isnan(v[e]).all() and np.isnan(nrm[e]).all() and key[e] == -1, (e, v[e], nrm[e], key[e])
    # the context is alive: a whole mesh still comes out
    assert len(marching_cubes(vol, level)[1]) > 0
