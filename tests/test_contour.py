"""Marching cubes (CPU) against scikit-image and analytic surfaces."""

import numpy as np
import pytest
from scipy.spatial import cKDTree
from skimage import measure

from render.contour import label_surfaces, marching_cubes, marching_cubes_blocks
from render.contour._tables import CORNERS, triangle_table


def sphere(n, r=0.6):
    x = np.linspace(-1, 1, n)
    return np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2), r, 2 / (n - 1)


def smooth_random(shape, seed):
    rng = np.random.default_rng(seed)
    f = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    return np.real(np.fft.ifftn(f * np.exp(-sum(kk ** 2 for kk in k) * 200)))


def ambiguous_faces(vol, level):
    """Whether any cube face has its two inside corners on a diagonal."""
    s = vol > level
    for ax in range(3):
        u, v = [a for a in range(3) if a != ax]
        a = np.moveaxis(s, (u, v), (0, 1))
        c00, c11 = a[:-1, :-1], a[1:, 1:]
        c01, c10 = a[:-1, 1:], a[1:, :-1]
        if ((c00 == c11) & (c01 == c10) & (c00 != c01)).any():
            return True
    return False


def closed_edges(faces):
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(e, axis=0, return_counts=True)
    return counts


@pytest.mark.parametrize("case", ["sphere", "smooth0", "smooth1", "noise"])
def test_same_vertices_as_scikit_image(case):
    if case == "sphere":
        vol, level = sphere(30)[0], 0.6
    elif case == "noise":
        vol, level = np.random.default_rng(5).random((14, 12, 13)), 0.5
    else:
        vol, level = smooth_random((28, 24, 26), int(case[-1])), 0.0
    v, f, n = marching_cubes(vol, level)
    sv, sf, sn, _ = measure.marching_cubes(vol, level, method="lorensen")
    assert len(v) == len(sv)
    d1, ix = cKDTree(sv).query(v)
    d2, _ = cKDTree(v).query(sv)
    assert max(d1.max(), d2.max()) < 1e-5  # one vertex per crossed edge, same places
    if not ambiguous_faces(vol, level):
        assert len(f) == len(sf)
    # Winding as scikit-image's default: geometric normals against the gradient normals.
    ours = np.einsum("ij,ij->i", np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]), n[f].mean(1))
    theirs = np.einsum("ij,ij->i", np.cross(sv[sf[:, 1]] - sv[sf[:, 0]], sv[sf[:, 2]] - sv[sf[:, 0]]),
                       sn[sf].mean(1))
    assert np.sign(np.median(ours)) == np.sign(np.median(theirs)) != 0
    if case != "noise":  # gradients of white noise are not meaningful
        assert np.median(np.einsum("ij,ij->i", n, sn[ix])) > 0.99


def test_sphere_watertight_area_and_volume():
    vol, r, h = sphere(128)
    v, f, _ = marching_cubes(vol, r, spacing=(h, h, h))
    assert (closed_edges(f) == 2).all()
    a, b, c = v[f[:, 0]].astype(float), v[f[:, 1]].astype(float), v[f[:, 2]].astype(float)
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1).sum()
    volume = abs(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6)
    assert area == pytest.approx(4 * np.pi * r ** 2, rel=0.01)
    assert volume == pytest.approx(4 / 3 * np.pi * r ** 3, rel=0.01)


def test_torus_watertight_even_with_ambiguous_faces():
    n = 48
    x = np.linspace(-1, 1, n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    vol = (np.sqrt(X ** 2 + Y ** 2) - 0.55) ** 2 + Z ** 2
    noise = np.random.default_rng(1).random(vol.shape) * 0.02  # provoke ambiguous faces
    assert ambiguous_faces(vol + noise, 0.06)
    v, f, _ = marching_cubes(vol + noise, 0.06)
    assert len(f) > 0 and (closed_edges(f) == 2).all()


def test_table_is_consistent():
    counts, tris = triangle_table()
    assert counts[0] == counts[255] == 0
    # Complementary cases cut the same edges.
    for c in range(256):
        used = set(tris[c, :counts[c]].ravel())
        crossed = {e for e, (a, b) in enumerate([(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
                                                 (0, 4), (1, 5), (2, 6), (3, 7)])
                   if ((c >> a) & 1) != ((c >> b) & 1)}
        assert used == crossed, c
    assert CORNERS.shape == (8, 3)


def test_level_outside_range_gives_empty_mesh():
    v, f, n = marching_cubes(np.zeros((4, 4, 4)) + np.arange(4), 10.0)
    assert v.shape == (0, 3) and f.shape == (0, 3) and n.shape == (0, 3)
    assert v.dtype == np.float32 and f.dtype == np.int32


def test_spacing_and_origin_place_vertices():
    vol, r, h = sphere(20)
    v0, _, _ = marching_cubes(vol, r)
    v1, _, _ = marching_cubes(vol, r, spacing=(2.0, 3.0, 0.5), origin=(1.0, -1.0, 4.0))
    np.testing.assert_allclose(v1, v0 * [2.0, 3.0, 0.5] + [1.0, -1.0, 4.0], rtol=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match=r"volume: expected a 3-D array, got 2-D of shape \(4, 4\)"):
        marching_cubes(np.zeros((4, 4)), 0.5)
    bad = np.zeros((4, 4, 4))
    bad[1, 1, 1] = np.nan
    with pytest.raises(ValueError, match="volume: contains NaN or inf"):
        marching_cubes(bad, 0.5)
    with pytest.raises(TypeError, match="volume: expected real numbers .*got dtype complex128"):
        marching_cubes(np.zeros((4, 4, 4), complex), 0.5)


def mesh_key(v, f, decimals=5):
    """Order-independent description of a mesh: its set of triangles by vertex position."""
    t = np.round(v[f].astype(np.float64), decimals)
    t = np.sort(t.view([("", t.dtype)] * 3).reshape(len(f), 3), axis=1)
    return sorted(map(bytes, t))


def test_several_levels_equal_separate_calls():
    vol = smooth_random((20, 22, 18), 3)
    levels = [-0.05, 0.0, 0.07]
    v, f, n = marching_cubes(vol, levels)
    parts = [marching_cubes(vol, lev) for lev in levels]
    assert len(v) == sum(len(p[0]) for p in parts) and len(f) == sum(len(p[1]) for p in parts)
    vs = np.concatenate([p[0] for p in parts])
    fs = np.concatenate([p[1] + o for p, o in zip(parts, np.cumsum([0] + [len(p[0]) for p in parts[:-1]]))])
    assert mesh_key(v, f) == mesh_key(vs, fs)


def test_second_field_sampled_at_vertices():
    vol, r, h = sphere(24)
    x = np.linspace(-1, 1, 24)
    linear = np.broadcast_to(3 * x[:, None, None] - 2 * x[None, None, :] + 1, vol.shape)
    v, f, n, vals = marching_cubes(vol, r, spacing=(h, h, h), origin=(-1, -1, -1), values=linear)
    # A linear field is interpolated exactly along the edges.
    np.testing.assert_allclose(vals, 3 * v[:, 0] - 2 * v[:, 2] + 1, atol=1e-5)


@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 2, 2), (3, 2, 1)])
@pytest.mark.parametrize("ghost", [1, 2])
def test_blocks_merge_into_the_single_block_mesh(blocks, ghost):
    from insitu import Domain

    vol = smooth_random((25, 22, 23), 4)
    spacing, origin = (0.1, 0.2, 0.15), (1.0, 2.0, 3.0)
    dom = Domain.create(vol.shape, blocks=blocks, ghost=ghost, spacing=spacing, origin=origin)
    arrs = {b.gid: dom.extract(vol, b.gid) for b in dom}
    v, f, n, s = marching_cubes_blocks(dom, arrs, [0.0, 0.04], values={g: 2 * a for g, a in arrs.items()})
    v1, f1, n1, s1 = marching_cubes(vol, [0.0, 0.04], spacing=spacing, origin=origin, values=2 * vol)
    assert len(v) == len(v1) and len(f) == len(f1)  # no duplicate vertices or triangles
    assert mesh_key(v, f) == mesh_key(v1, f1)
    order, order1 = np.lexsort(v.T), np.lexsort(v1.T)
    np.testing.assert_allclose(v[order], v1[order1], atol=1e-6)
    np.testing.assert_allclose(s[order], s1[order1], atol=1e-6)
    if ghost >= 2:  # gradients at block edges need two samples beyond
        np.testing.assert_allclose(n[order], n1[order1], atol=1e-5)


def test_label_surfaces_are_closed_and_separate():
    lab = np.zeros((20, 20, 20), np.int32)
    lab[2:8, 3:9, 4:10] = 3
    lab[10:18, 10:19, 0:6] = 7  # touches the grid's edge
    v, f, n, fl = label_surfaces(lab)
    assert set(fl.tolist()) == {3, 7}
    for i in (3, 7):
        assert (closed_edges(f[fl == i]) == 2).all()
    only3 = label_surfaces(lab, [3])
    assert set(only3[3].tolist()) == {3}
    # The box of label 3 spans 6x6x6 samples; its surface lies half a cell outside the voxel
    # centres of its boundary samples (level 0.5 between 1 and 0) ...
    lo, hi = v[f[fl == 3]].reshape(-1, 3).min(0), v[f[fl == 3]].reshape(-1, 3).max(0)
    np.testing.assert_allclose(lo, [1.5, 2.5, 3.5])
    np.testing.assert_allclose(hi, [7.5, 8.5, 9.5])


def test_writes_into_caller_buffers():
    vol, r, h = sphere(20)
    v, f, n = marching_cubes(vol, r)
    bufs = (np.zeros((len(v) + 10, 3), np.float32), np.zeros((len(f) + 5, 3), np.int32),
            np.zeros((len(v) + 10, 3), np.float32))
    v2, f2, n2 = marching_cubes(vol, r, out=bufs)
    assert np.shares_memory(v2, bufs[0]) and np.shares_memory(f2, bufs[1])
    np.testing.assert_array_equal(v2, v)
    np.testing.assert_array_equal(f2, f)
    assert (bufs[1][len(f):] == 0).all()  # nothing written past the mesh
    small = (np.zeros((3, 3), np.float32), bufs[1], bufs[2])
    with pytest.raises(ValueError, match=rf"out verts: need float32 of shape \({len(v)}\+, 3\), got float32 \(3, 3\)"):
        marching_cubes(vol, r, out=small)
    with pytest.raises(ValueError, match=r"out faces: need int32"):
        marching_cubes(vol, r, out=(bufs[0], bufs[1].astype(np.int64), bufs[2]))


def test_strided_and_integer_volumes_read_as_they_are():
    vol = smooth_random((40, 30, 34), 6)
    ref = marching_cubes(vol[::2, :, 1::2].copy(), 0.0)
    got = marching_cubes(vol[::2, :, 1::2], 0.0)  # a view: no copy needed
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_allclose(got[0], ref[0])
    q = np.clip((vol - vol.min()) / np.ptp(vol) * 255, 0, 255).astype(np.uint8)
    a, b = marching_cubes(q, 100.5), marching_cubes(q.astype(np.float64), 100.5)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_allclose(a[0], b[0], atol=1e-6)


def crossed_edge_end(vol, level):
    """A sample at the lower end of an axis-0 edge the level crosses."""
    above = vol > level
    return np.argwhere(above[:-1] != above[1:])[0]


def test_non_finite_values_field_and_outer_ghosts():
    from insitu import Domain

    vol = smooth_random((20, 20, 20), 8)
    bad = vol.copy()
    far = np.argwhere((vol > 0.0) & (np.abs(vol) > 0.5 * np.abs(vol).max()))[0]  # no crossed edge ends here
    bad[tuple(far)] = np.nan
    np.testing.assert_array_equal(marching_cubes(vol, 0.0, values=bad)[1], marching_cubes(vol, 0.0)[1])
    bad[tuple(crossed_edge_end(vol, 0.0))] = np.inf
    with pytest.raises(ValueError, match="values: contains NaN or inf where the surface samples it"):
        marching_cubes(vol, 0.0, values=bad)
    with pytest.raises(ValueError, match="level: must be finite"):
        marching_cubes(vol, np.nan)
    # Ghost layers outside the domain are never read: NaN there is not an error.
    dom = Domain.create(vol.shape, blocks=(2, 1, 1), ghost=1)
    arrs = {b.gid: dom.extract(vol, b.gid) for b in dom}
    for a in arrs.values():
        a[:, 0, :] = np.nan  # axis 1 has no neighbour: all outer ghosts
    v, f, _ = marching_cubes_blocks(dom, arrs, 0.0)
    assert mesh_key(v, f) == mesh_key(*marching_cubes(vol, 0.0)[:2])


def _edges_of(verts):
    """(i, j, k, axis) of the grid edge each vertex lies on (unit spacing, origin 0; no
    vertex exactly at a sample)."""
    fl = np.floor(verts).astype(np.int64)
    frac = verts != fl
    assert (frac.sum(axis=1) == 1).all()
    return fl, np.argmax(frac, axis=1)


@pytest.mark.parametrize("shape, region", [((47, 35, 71), None), ((47, 35, 71), ((3, 2, 5), (46, 34, 70))),
                                           ((40, 6, 31), None), ((18, 5, 61), None), ((33, 4, 30), None)])
def test_numbering_is_by_tile_then_plane(shape, region):
    """Vertices and faces come tile by tile (TILE points of a row in a chunk of planes,
    tiles by chunk, row, column), in a tile its lead column's vertices first (plane,
    axis), then the other points' plane by plane (point, axis), its faces plane by plane
    (point): the order both backends write (render.contour._tables), rebuilt here from
    where each vertex and triangle lies."""
    from render.contour._tables import TILE, chunk_planes

    vol = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    verts, faces, _ = marching_cubes(vol, 0.1, region=region)
    lo, hi = ((0, 0, 0), [n - 1 for n in shape]) if region is None else region  # the box of points
    chunk = chunk_planes(hi[0] - lo[0] + 1)
    point, axis = _edges_of(verts)
    i, j, k = (point - lo).T
    col = k % TILE
    key = np.stack([i // chunk, j, k // TILE, col != 0, i, np.where(col != 0, k, 0), axis])
    assert len(verts) > 500
    assert (np.lexsort(key[::-1]) == np.arange(len(verts))).all()  # already in key order
    assert np.unique(key, axis=1).shape[1] == len(verts)  # and no two alike
    ci, cj, ck = (point[faces].min(axis=1) - lo).T  # a triangle's cube (no face-flat triangles in noise)
    fkey = np.stack([ci // chunk, cj, ck // TILE, ci, ck])
    assert (np.lexsort(fkey[::-1]) == np.arange(len(faces))).all()
