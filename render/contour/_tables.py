"""Marching-cubes case tables, derived from the cube's geometry rather than typed in.

Corners ``v0..v7`` sit at offsets (axis0, axis1, axis2) ``(0,0,0) (1,0,0) (1,1,0)
(0,1,0) (0,0,1) (1,0,1) (1,1,1) (0,1,1)``; the 12 edges join them as in Lorensen and
Cline. For each of the 256 inside/outside patterns every cube face gets 0, 1 or 2
segments between its crossed edges; an ambiguous face (two diagonal corners inside)
always separates its inside corners. The rule depends on the face's four corners only,
so two cubes sharing a face cut it the same way and meshes stay watertight. Segments
are oriented (faces walked counter-clockwise seen from outside) and chained into closed
loops, each loop a fan of ``k - 2`` triangles: the same count as Lorensen's table
wherever no face is ambiguous.

A loop that crosses an ambiguous face twice (its outside corners joined through the
cube) has four vertices on that face's edges. A fan diagonal between two of them would
lie in the face: a triangle flat in it, and the neighbouring cube, cutting the face the
same way, could use the same diagonal, giving an edge of four triangles. So each loop
is fanned from its first vertex that shares no cube face with a vertex it joins by a
diagonal; every loop has one, and the fan keeps the loop's orientation.
"""

from __future__ import annotations

import functools

import numpy as np

CORNERS = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0),
                    (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)], np.int64)
EDGES = np.array([(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
                  (0, 4), (1, 5), (2, 6), (3, 7)], np.int64)


def _faces() -> list[tuple[int, int, int, int]]:
    """The six faces as corner cycles, counter-clockwise seen from outside the cube."""
    faces = []
    for axis in range(3):
        for side in (0, 1):
            cs = [c for c in range(8) if CORNERS[c, axis] == side]
            centre = CORNERS[cs].mean(0)
            normal = np.zeros(3)
            normal[axis] = 1 if side else -1
            u, v = [a for a in range(3) if a != axis]
            ang = [np.arctan2(CORNERS[c, v] - centre[v], CORNERS[c, u] - centre[u]) for c in cs]
            ring = [c for _, c in sorted(zip(ang, cs))]
            # Orient the ring so its winding normal is the outward normal.
            p = CORNERS[ring].astype(float)
            if np.dot(np.cross(p[1] - p[0], p[2] - p[1]), normal) < 0:
                ring = ring[::-1]
            faces.append(tuple(ring))
    return faces


def _edge_faces(faces: list[tuple[int, int, int, int]]) -> list[frozenset[int]]:
    """Per cube edge the (two) faces that hold it."""
    return [frozenset(f for f, ring in enumerate(faces) if a in ring and b in ring) for a, b in EDGES]


def _fan(loop: list[int], edge_faces: list[frozenset[int]]) -> list[tuple[int, int, int]]:
    """``k - 2`` triangles over a loop of k edges, none with a diagonal inside a cube face."""
    k = len(loop)
    for a in range(k):
        ring = loop[a:] + loop[:a]
        if not any(edge_faces[ring[0]] & edge_faces[ring[i]] for i in range(2, k - 1)):
            return [(ring[0], ring[i], ring[i + 1]) for i in range(1, k - 1)]
    raise RuntimeError(f"marching-cubes table: no fan of loop {loop} keeps its diagonals off the cube faces")


def _edge_of(a: int, b: int) -> int:
    for e, (p, q) in enumerate(EDGES):
        if {p, q} == {a, b}:
            return e
    raise KeyError((a, b))


@functools.cache
def triangle_table() -> tuple[np.ndarray, np.ndarray]:
    """``(counts, tris)``: triangles per case (256,) and their edges (256, 5, 3)."""
    faces = _faces()
    edge_faces = _edge_faces(faces)
    counts = np.zeros(256, np.int64)
    tris = np.full((256, 5, 3), -1, np.int64)
    for case in range(256):
        inside = [(case >> c) & 1 for c in range(8)]
        nxt = {}  # oriented segments: start edge -> end edge
        for ring in faces:
            exits, entries = [], []  # crossings along the ring walk
            for n in range(4):
                a, b = ring[n], ring[(n + 1) % 4]
                if inside[a] and not inside[b]:
                    exits.append((n, _edge_of(a, b)))
                elif inside[b] and not inside[a]:
                    entries.append((n, _edge_of(a, b)))
            # Cut each inside run off: from its exit back to the entry that began it,
            # the nearest entry before it along the ring.
            for n, e_exit in exits:
                _, e_entry = min(entries, key=lambda x: (n - x[0]) % 4)
                nxt[e_exit] = e_entry
        loops, seen = [], set()
        for start in nxt:
            if start in seen:
                continue
            loop, e = [], start
            while e not in seen:
                seen.add(e)
                loop.append(e)
                e = nxt[e]
            loops.append(loop)
        t = 0
        for loop in loops:
            for tri in _fan(loop, edge_faces):
                tris[case, t] = tri
                t += 1
        counts[case] = t
    return counts, tris


# Kernel form of the tables, shared by the Numba and CUDA paths.
EDGE_AXIS = np.array([int(np.nonzero(CORNERS[b] - CORNERS[a])[0][0]) for a, b in EDGES], np.int64)
EDGE_BASE = np.array([np.minimum(CORNERS[a], CORNERS[b]) for a, b in EDGES], np.int64)


@functools.cache
def kernel_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ntri, tri, edge)`` as int8: triangles per case (256,), their cube edges
    (256, 15), and per cube edge its lower corner's offset and its axis (12, 4)."""
    counts, tris = triangle_table()
    edge = np.concatenate([EDGE_BASE, EDGE_AXIS[:, None]], axis=1)
    return counts.astype(np.int8), tris.reshape(256, 15).astype(np.int8), edge.astype(np.int8)


def chunk_planes(npoints: int) -> int:
    """Planes per segment along axis 0: at most 16 segments per row, at least 16 planes.

    Both backends split rows the same way, so they number vertices and faces alike.
    """
    return max(16, -(-npoints // 16))


# The mesh's numbering, the same on both backends. A tile is the TILE points k of one row j
# in one chunk of planes (tiles numbered (chunk, row, column)); its vertices and faces are
# consecutive, tiles in order. Within a tile come first the vertices of its first point
# (its lead column: plane by plane, each point's crossed edges by axis), then those of
# the other points plane by plane (in a plane by point, then axis); its faces plane by
# plane, by cube. Numbered plane by plane, a GPU warp's lanes write neighbouring entries;
# the lead column is apart because the tile before reads its numbers without counting
# the tile's other points.
TILE = 30


def tile_columns(m2: int) -> int:
    """Tiles along k of a row of `m2` points."""
    return -(-m2 // TILE)


def tile_count(lo, hi, chunk: int) -> int:
    """Tiles of the point box ``lo..hi`` (inclusive): chunks x rows x tiles per row."""
    m = [h - l + 1 for l, h in zip(lo, hi)]
    return ((m[0] - 1) // chunk + 1) * m[1] * tile_columns(m[2])
