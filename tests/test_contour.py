"""Marching cubes (CPU) against scikit-image and analytic surfaces."""

import numpy as np
import pytest
from scipy.spatial import cKDTree
from skimage import measure

from render.contour import marching_cubes
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
    with pytest.raises(ValueError, match=r"volume: expected a 3-D array, got shape \(4, 4\)"):
        marching_cubes(np.zeros((4, 4)), 0.5)
    bad = np.zeros((4, 4, 4))
    bad[1, 1, 1] = np.nan
    with pytest.raises(ValueError, match="volume: contains NaN or inf"):
        marching_cubes(bad, 0.5)
    with pytest.raises(TypeError, match="volume: expected a real numeric dtype, got complex128"):
        marching_cubes(np.zeros((4, 4, 4), complex), 0.5)
