"""Case tables of the cell contour, generated at import for every shape from its faces.

How a case is built (the same rule for tets, hexahedra, wedges, pyramids, triangles and
quads): a corner is *above* when its value is ``>= level`` (VTK's test). Walk each face of
the cell (for a 2-D cell, the cell itself) round its corners, counter-clockwise seen from
outside the cell (faces are oriented from the shape's reference coordinates, VTK's
parametric ones, so positively oriented cells as VTK defines them). The walk crosses the
level on the face's crossed edges, alternately going up (below -> above) and down; each
down crossing is joined to the crossing just before it, an up one. So on a face with four
crossings (the ambiguous quad face) the above corners are cut off from each other and
the below ones joined, decided from the face alone: two cells sharing the face agree,
and the surface has no cracks. A crossed edge is a down crossing in one of its two faces
and an up crossing in the other, so the joins link the crossed edges into closed loops;
each loop is cut into triangles by a fan from its lowest edge. The loops run with the
above side on their left seen from outside, which makes each triangle's right-hand
normal point towards higher values (and a 2-D cell's segments have higher values on
their left, seen from +z).

For tets the loops are the planar triangles and quads of marching tetrahedra. For the
other shapes a loop of more than four edges is in general not planar, and VTK's tables
triangulate some of them along other diagonals: same vertices, slightly different area.
"""

from __future__ import annotations

import numpy as np

from ._mesh import HEXAHEDRON, PYRAMID, QUAD, REFERENCE_CORNERS, TETRA, TRIANGLE, WEDGE

#: Reference corner coordinates (VTK's parametric coordinates of each cell).
REFERENCE = REFERENCE_CORNERS

#: Faces of each shape as corner cycles (any direction: oriented outward below).
_FACES: dict[int, list[tuple[int, ...]]] = {
    TETRA: [(0, 1, 2), (0, 1, 3), (1, 2, 3), (2, 0, 3)],
    HEXAHEDRON: [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)],
    WEDGE: [(0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)],
    PYRAMID: [(0, 1, 2, 3), (0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4)],
    TRIANGLE: [(0, 1, 2)],
    QUAD: [(0, 1, 2, 3)],
}

#: Shapes in table order; 3-D ones give triangles, 2-D ones segments.
SHAPES = (TETRA, HEXAHEDRON, WEDGE, PYRAMID, TRIANGLE, QUAD)
DIM = {TETRA: 3, HEXAHEDRON: 3, WEDGE: 3, PYRAMID: 3, TRIANGLE: 2, QUAD: 2}
MAX_CORNERS = 8
MAX_SLOTS = 12  # crossed edges of one case (all 12 of a hexahedron at most)


def _oriented_faces(shape: int) -> list[tuple[int, ...]]:
    """Faces counter-clockwise seen from outside (2-D cells: seen from +z)."""
    ref = np.asarray(REFERENCE[shape], float)
    centre = ref.mean(axis=0)
    out = []
    for f in _FACES[shape]:
        p = ref[list(f)]
        normal = sum(np.cross(p[i], p[(i + 1) % len(f)]) for i in range(len(f)))  # Newell
        outward = (0, 0, 1) if DIM[shape] == 2 else p.mean(axis=0) - centre
        out.append(f if np.dot(normal, outward) > 0 else tuple(reversed(f)))
    return out


def edges(shape: int) -> list[tuple[int, int]]:
    """The shape's edges as sorted corner pairs, in increasing order."""
    return sorted({_pair(f[i], f[(i + 1) % len(f)]) for f in _FACES[shape] for i in range(len(f))})


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def case(shape: int, mask: int) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
    """Crossed edges (corner pairs, increasing) and faces (triangles, or segments for 2-D
    shapes) as indices into them, for the corners set in `mask` above the level."""
    above = [bool(mask >> c & 1) for c in range(len(REFERENCE[shape]))]
    slots = [e for e in edges(shape) if above[e[0]] != above[e[1]]]
    slot = {e: n for n, e in enumerate(slots)}
    nxt: dict[int, int] = {}
    segments: list[tuple[int, ...]] = []
    for f in _oriented_faces(shape):
        walk = [(f[i], f[(i + 1) % len(f)]) for i in range(len(f))]
        crossings = [(slot[_pair(*w)], above[w[0]]) for w in walk if above[w[0]] != above[w[1]]]
        for i, (s, down) in enumerate(crossings):
            if down:  # joined to the crossing before it (an up one)
                prev = crossings[i - 1][0]
                nxt[s] = prev
                segments.append((s, prev))
    if DIM[shape] == 2:
        return slots, segments
    if sorted(nxt) != list(range(len(slots))) or sorted(nxt.values()) != list(range(len(slots))):
        raise AssertionError(f"shape {shape} case {mask}: the joins do not make loops")
    tris: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for start in range(len(slots)):
        if start in seen:
            continue
        loop = [start]
        while nxt[loop[-1]] != start:
            loop.append(nxt[loop[-1]])
        seen.update(loop)
        tris += [(loop[0], loop[i], loop[i + 1]) for i in range(1, len(loop) - 1)]
    return slots, tris


def build() -> dict[str, np.ndarray]:
    """The flat tables the kernels read.

    Returns
    -------
    dict with
        base : (16,) int32 -- first case of each VTK type code, -1 where not contoured;
        nvert, nface : (cases,) uint8 -- crossed edges and faces of each case;
        slots : (cases, MAX_SLOTS, 2) uint8 -- the corners of each crossed edge;
        faces : (cases, max faces, 3) uint8 -- slot indices (segments use the first two).
    """
    base = np.full(16, -1, np.int32)
    per_case: list[tuple[list[tuple[int, int]], list[tuple[int, ...]]]] = []
    for shape in SHAPES:
        base[shape] = len(per_case)
        per_case += [case(shape, m) for m in range(1 << len(REFERENCE[shape]))]
    maxf = max(len(f) for _, f in per_case)
    n = len(per_case)
    nvert = np.zeros(n, np.uint8)
    nface = np.zeros(n, np.uint8)
    slots = np.zeros((n, MAX_SLOTS, 2), np.uint8)
    faces = np.zeros((n, maxf, 3), np.uint8)
    for c, (sl, fs) in enumerate(per_case):
        nvert[c], nface[c] = len(sl), len(fs)
        if sl:
            slots[c, :len(sl)] = sl
        for k, f in enumerate(fs):
            faces[c, k, :len(f)] = f
    return {"base": base, "nvert": nvert, "nface": nface, "slots": slots, "faces": faces}


TABLES = build()
MAX_FACES = int(TABLES["faces"].shape[1])
