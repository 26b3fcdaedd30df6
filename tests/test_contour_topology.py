"""Marching cubes (CPU) gives a 2-manifold, consistently oriented mesh (issue 22).

Exhaustive over the table: every cube case alone, and every pair of cubes sharing a
face with all 2^12 sign patterns of their corners, along each axis. Then random fields
(noise, thresholded noise, integer labels, levels equal to samples) at several sizes,
whose vertex sets must stay scikit-image's (lorensen).

The check helpers take a mesh in grid units (unit spacing, origin 0) and use NumPy only;
tests/gpu/test_contour_gpu.py imports them.
"""

import numpy as np
import pytest
from scipy.spatial import cKDTree
from skimage import measure

from render.contour import label_surfaces, marching_cubes

# Corner n of the cube sits at these offsets (as render/contour/_tables.CORNERS); the
# exhaustive tests spell the case out here so they do not lean on the table module.
CUBE = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)])


def edge_uses(faces):
    """Undirected edges of a triangle mesh and how often each is walked each way.

    Returns
    -------
    edges : (E, 2) int64
        Vertex pairs, lower index first.
    forward, backward : (E,) int64
        Triangles walking the edge from its lower to its higher vertex, and back.
    """
    d = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]).astype(np.int64)
    if not len(d):
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    edges, inv = np.unique(np.sort(d, axis=1), axis=0, return_inverse=True)
    inv = inv.ravel()
    up = d[:, 0] < d[:, 1]
    return (edges, np.bincount(inv[up], minlength=len(edges)), np.bincount(inv[~up], minlength=len(edges)))


def on_volume_boundary(verts, edges, shape):
    """Whether each edge lies in one boundary plane of a volume of `shape` samples."""
    p, q = verts[edges[:, 0]], verts[edges[:, 1]]
    out = np.zeros(len(edges), bool)
    for a, n in enumerate(shape):
        for side in (0, n - 1):
            out |= (p[:, a] == side) & (q[:, a] == side)
    return out


def at_grid_point(verts):
    """Whether each vertex sits on a sample (all coordinates integral): where a sample
    equals the level, or float32 rounds a vertex onto its edge's end."""
    v = verts.astype(np.float64)
    return (v == np.round(v)).all(axis=1)


def face_flat(verts, faces):
    """Whether each triangle lies in one grid plane (one coordinate integral and equal
    at its three vertices): flat inside a cell face."""
    t = verts[faces].astype(np.float64)  # (F, 3 vertices, 3 axes)
    r = np.round(t)
    return ((t == r).all(axis=1) & (r[:, 0] == r[:, 1]) & (r[:, 1] == r[:, 2])).any(axis=1)


def degenerate(verts, faces):
    """Whether each triangle repeats a vertex or has zero area."""
    t = verts[faces].astype(np.float64)
    area = np.linalg.norm(np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]), axis=1)
    rep = (faces[:, 0] == faces[:, 1]) | (faces[:, 1] == faces[:, 2]) | (faces[:, 2] == faces[:, 0])
    return rep | (area == 0)


def mesh_defects(verts, faces, shape=None):
    """What breaks a 2-manifold, oriented, watertight mesh, by kind.

    `shape`: the volume's samples; edges in its boundary planes must be used once, all
    others twice, once each way. None: a closed mesh (every edge twice). Flat and
    degenerate triangles count only where no vertex sits on a sample (there a level
    equal to the samples forces them).

    Returns
    -------
    dict of str -> index array
        ``"open"``, ``"non-manifold"``, ``"misoriented"``, ``"boundary"``: offending
        edges (rows of ``edge_uses(faces)[0]``); ``"flat"``, ``"degenerate"``: triangles.
    """
    edges, fwd, bwd = edge_uses(faces)
    uses = fwd + bwd
    boundary = on_volume_boundary(verts, edges, shape) if shape is not None else np.zeros(len(edges), bool)
    free = ~at_grid_point(verts)[faces].any(axis=1)
    return {
        "open": np.flatnonzero(~boundary & (uses == 1)),
        "non-manifold": np.flatnonzero(uses > 2),
        "misoriented": np.flatnonzero(~boundary & (uses == 2) & (fwd != 1)),
        "boundary": np.flatnonzero(boundary & (uses != 1)),
        "flat": np.flatnonzero(free & face_flat(verts, faces)),
        "degenerate": np.flatnonzero(free & degenerate(verts, faces)),
    }


def assert_manifold(verts, faces, shape=None, what="mesh"):
    """Raise naming each kind of defect :func:`mesh_defects` finds, with counts."""
    bad = {k: len(v) for k, v in mesh_defects(verts, faces, shape).items() if len(v)}
    assert not bad, f"{what}: {bad}"


def assert_same_vertices_as_scikit_image(vol, level, verts):
    """The vertex multiset equals scikit-image's lorensen one (positions within 1e-5).

    Ours are snapped to their nearest scikit-image vertex before the sorted comparison of
    rounded positions: rounding both as they are would split pairs that differ by float
    noise across a rounding boundary. Vertices on a sample repeat (one per crossed edge,
    scikit-image's a few 1e-16 apart), so the comparison counts multiplicities.
    """
    sv = measure.marching_cubes(vol, level, method="lorensen")[0].astype(np.float64)
    assert len(verts) == len(sv)
    d, ix = cKDTree(sv).query(verts.astype(np.float64))
    assert d.max() < 1e-5
    ours, theirs = np.round(sv[ix], 6), np.round(sv, 6)
    np.testing.assert_array_equal(ours[np.lexsort(ours.T)], theirs[np.lexsort(theirs.T)])


def signs(case, shape):
    """A volume of ``prod(shape)`` samples, +1 where bit n of `case` is set (C order), else -1."""
    n = int(np.prod(shape))
    return (((case >> np.arange(n)) & 1) * 2.0 - 1.0).reshape(shape)


def cube_case(case):
    """The 2x2x2 volume of marching-cubes case `case` (bit n: corner n inside)."""
    vol = np.full((2, 2, 2), -1.0)
    for n, (i, j, k) in enumerate(CUBE):
        if (case >> n) & 1:
            vol[i, j, k] = 1.0
    return vol


def test_every_cube_case_alone():
    bad = {}
    for case in range(256):
        vol = cube_case(case)
        v, f, _ = marching_cubes(vol, 0.0)
        assert not at_grid_point(v).any()  # ±1 samples: vertices mid-edge, nothing exempt
        assert len(v) == sum((np.diff(vol, axis=a) != 0).sum() for a in range(3)), case
        found = {k: len(x) for k, x in mesh_defects(v, f, vol.shape).items() if len(x)}
        if found:
            bad[case] = found
    assert not bad, f"cube cases with defects: {bad}"


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_every_pair_of_cubes_sharing_a_face(axis):
    # The 4096 sign patterns of two cubes side by side along `axis`, each block of 3x2x2
    # samples (along `axis` 3) set apart by planes of outside samples so they do not touch:
    # one call, one closed mesh. Its shared face is where a neighbour's cut must match;
    # the outer faces meet all-outside neighbours, each a case of its own.
    block = tuple(3 if a == axis else 2 for a in range(3))
    stride = np.array(block) + 1
    grid = (16, 16, 16)
    vol = np.full(tuple(1 + g * s for g, s in zip(grid, stride)), -1.0)
    for c, g in enumerate(np.ndindex(*grid)):
        at = tuple(slice(1 + gi * s, 1 + gi * s + b) for gi, s, b in zip(g, stride, block))
        vol[at] = signs(c, block)
    v, f, _ = marching_cubes(vol, 0.0)
    assert not at_grid_point(v).any()
    defects = mesh_defects(v, f)
    edges = edge_uses(f)[0]
    where = {}  # per kind of defect the patterns, from the cell its edges or triangles lie in
    for kind, idx in defects.items():
        pts = v[f[idx]] if kind in ("flat", "degenerate") else v[edges[idx]]
        cells = np.floor(pts.mean(axis=1) / stride).astype(int)
        if len(cells):
            where[kind] = sorted({int(np.ravel_multi_index(tuple(c), grid)) for c in cells})
    assert not where, (f"pairs along axis {axis} (bit n: sample n of the {block} block in C order), "
                       + "; ".join(f"{k}: {len(p)} patterns, {p[:8]}" for k, p in where.items()))
    # Every pattern contributes: as many triangles as its two cubes and their shells.
    assert len(f) > 4096


def noise(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


SIZES = [(2, 3, 2), (5, 6, 7), (17, 16, 18), (33, 31, 32)]


def fields():
    """(id, volume, levels, whether samples equal a level)."""
    rng = np.random.default_rng(22)
    for shape in SIZES:
        tag = "x".join(map(str, shape))
        yield f"noise32-{tag}", noise(shape, np.float32, 1), [0.0], False
        yield f"noise64-{tag}", noise(shape, np.float64, 2), [0.0, 0.7], False
        yield f"binary-{tag}", (noise(shape, np.float64, 3) > 0).astype(np.uint8), [0.5], False
        yield f"labels-{tag}", rng.integers(0, 4, shape).astype(np.uint8), [0.5, 1.5, 2.5], False
        yield f"ternary-{tag}", rng.choice(np.array([-1.0, 0.0, 1.0]), shape), [0.0], True
        yield f"labels-at-{tag}", rng.integers(0, 4, shape).astype(np.uint8), [1.0, 2.0], True
        # float32 samples and levels: scikit-image reads volumes as float32, so a float64
        # sample equal to 0.3 would sit above its (rounded up) copy of it
        yield f"rounded-{tag}", np.round(noise(shape, np.float32, 4), 1), [0.0, float(np.float32(0.3))], True


FIELDS = list(fields())


@pytest.mark.parametrize("vol,levels,equal", [f[1:] for f in FIELDS], ids=[f[0] for f in FIELDS])
def test_random_fields_are_manifold_with_scikit_image_vertices(vol, levels, equal):
    for lev in levels:
        v, f, _ = marching_cubes(vol, lev)
        if vol.min() <= lev <= vol.max():  # scikit-image refuses levels outside the data
            assert_same_vertices_as_scikit_image(vol, lev, v)
        if not equal:
            # Nothing sits on a sample: the boundary test by position is exact.
            assert_manifold(v, f, vol.shape, f"level {lev}")
        # Closed: padded with outside samples, every edge (samples at the level
        # included) is shared by two triangles, once each way.
        low = min(vol.min(), lev) - 1 if vol.dtype.kind == "f" else np.iinfo(vol.dtype).min
        assert low < lev
        pv, pf, _ = marching_cubes(np.pad(vol, 1, constant_values=low), lev)
        assert_manifold(pv, pf, None, f"padded, level {lev}")
        if equal and vol.size > 1000:
            assert at_grid_point(pv).any()  # the field does put vertices on samples


def test_several_levels_in_one_call_stay_manifold():
    vol = noise((20, 21, 19), np.float64, 9)
    v, f, _ = marching_cubes(vol, [-0.5, 0.0, 0.5])
    assert_manifold(v, f, vol.shape)


def test_label_surfaces_are_closed():
    lab = np.random.default_rng(5).integers(0, 5, (18, 17, 16)).astype(np.int32)
    v, f, _, fl = label_surfaces(lab)
    for i in range(1, 5):
        # label_surfaces pads by one sample and shifts the origin back: grid units still
        assert_manifold(v, f[fl == i], None, f"label {i}")


def test_noise_has_no_flat_triangles_or_four_way_edges():
    # The case: 64^3 standard normal float32 at level 0. The old table fanned
    # loops that cross an ambiguous face twice through that face.
    vol = noise((64, 64, 64), np.float32, 0)
    v, f, _ = marching_cubes(vol, 0.0)
    edges, fwd, bwd = edge_uses(f)
    assert face_flat(v, f).sum() == 0
    assert (fwd + bwd).max() == 2
    assert_manifold(v, f, vol.shape)
    assert_same_vertices_as_scikit_image(vol, 0.0, v)


def test_the_gpu_tables_give_each_cube_the_cpus_triangles():
    """The GPU passes look cases up by their ballot bits (bit 4 di + 2 dj + dk for the
    corner at (di, dj, dk)) in tables built on the host: for every pattern, the triangles
    they give a lone cube are those the CPU path makes of it."""
    import re

    from render.contour import _gpu
    from render.contour._tables import EDGES, kernel_tables

    offs = {k: int(v) for k, v in re.findall(r"#define (TRI|CASE_Q|NTRI_C|NTRI_Q) (\d+)", _gpu.source("float")[0])}
    packed = _gpu.tables(*kernel_tables()[:2])
    assert packed.dtype == np.uint8 and len(packed) == offs["NTRI_Q"] + 256
    tri = packed[offs["TRI"]:offs["TRI"] + 4096].reshape(256, 16)
    for q in range(256):
        vol = np.array([[[(q >> (4 * di + 2 * dj + dk)) & 1 for dk in (0, 1)] for dj in (0, 1)] for di in (0, 1)],
                       np.float32)
        verts, faces, _ = marching_cubes(vol, 0.5)
        case = int(packed[offs["CASE_Q"] + q])
        nt = int(packed[offs["NTRI_Q"] + q])
        assert nt == packed[offs["NTRI_C"] + case] == len(faces), q
        # the table's edges, as the points halfway along them (the level is halfway)
        want = [CUBE[list(EDGES[e])].mean(0) for e in tri[case, :3 * nt]]
        np.testing.assert_allclose(verts[faces.ravel()], np.reshape(want, (-1, 3)), err_msg=str(q))
